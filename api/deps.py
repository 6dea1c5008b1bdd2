"""Typed dependencies for the routers: SessionDep, CurrentUser, AdminUser, LocalDep."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.db import get_db
from api.local import LocalMode
from api.models import User
from api.security import user_for_token
from api.settings import Settings

SessionDep = Annotated[Session, Depends(get_db)]
bearer = HTTPBearer(auto_error=False, description="a token from POST /users/{id}/tokens")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

UNAUTHORIZED = HTTPException(
    status.HTTP_401_UNAUTHORIZED,
    "missing or invalid bearer token",
    headers={"WWW-Authenticate": "Bearer"},
)


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def current_user(session: SessionDep, credentials: Credentials) -> User:
    if credentials is None:
        raise UNAUTHORIZED
    user = user_for_token(session, credentials.credentials)
    if user is None:
        raise UNAUTHORIZED
    return user


CurrentUser = Annotated[User, Depends(current_user)]


def admin_user(user: CurrentUser) -> User:
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin only")
    return user


AdminUser = Annotated[User, Depends(admin_user)]


def get_local(request: Request) -> LocalMode:
    local: LocalMode | None = request.app.state.local
    if local is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no cluster backend running")
    return local


LocalDep = Annotated[LocalMode, Depends(get_local)]


def can_see(user: User, tenant: str) -> bool:
    """Tenancy: a user acts on its own tenant's objects only; an admin on all."""
    return user.role == "admin" or user.tenant == tenant
