"""Typed dependencies for the routers: SessionDep, CurrentUser, AdminUser, LocalDep.

CurrentUser and LocalDep run on the event loop (no thread hop): the user comes from
the app's TokenCache, or from the database in the threadpool when not cached.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from api.backends import JobBackend
from api.db import get_db
from api.local import LocalMode
from api.models import User
from api.security import TokenCache, hash_token, user_for_token
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


async def current_user(request: Request, credentials: Credentials) -> User:
    if credentials is None:
        raise UNAUTHORIZED
    cache: TokenCache = request.app.state.tokens
    digest = hash_token(credentials.credentials)
    user = cache.get(digest)
    if user is None:
        generation = cache.generation()
        user = await run_in_threadpool(_lookup, request.app.state.sessions, credentials.credentials)
        if user is None:
            raise UNAUTHORIZED
        cache.put(digest, user, generation)
    return user


def _lookup(sessions: sessionmaker[Session], token: str) -> User | None:
    with sessions() as session:
        return user_for_token(session, token)  # detached once the session closes


CurrentUser = Annotated[User, Depends(current_user)]


def admin_user(user: CurrentUser) -> User:
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin only")
    return user


AdminUser = Annotated[User, Depends(admin_user)]


async def get_local(request: Request) -> LocalMode:
    local: LocalMode | None = request.app.state.local
    if local is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no cluster backend running")
    return local


LocalDep = Annotated[LocalMode, Depends(get_local)]


async def get_backend(request: Request) -> JobBackend:
    backend: JobBackend | None = request.app.state.backend
    if backend is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no cluster backend running")
    return backend


# Where jobs run: local mode's LiveCluster or, in cluster mode, Kubernetes (api.backends).
BackendDep = Annotated[JobBackend, Depends(get_backend)]


def can_see(user: User, tenant: str) -> bool:
    """Tenancy: a user acts on its own tenant's objects only; an admin on all."""
    return user.role == "admin" or user.tenant == tenant
