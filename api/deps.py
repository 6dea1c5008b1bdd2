"""Typed dependencies for the routers: SessionDep, CurrentUser, AdminUser, LocalDep.

CurrentUser and LocalDep run on the event loop (no thread hop): the user is the one
api.http.guard authenticated before the body was read, else (a request the guard does not
cover) from the app's TokenCache or the database (api.http.security.authenticate).
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from api.backends import JobBackend
from api.http.errors import unavailable
from api.http.guard import UNAUTHORIZED_DETAIL, USER_KEY
from api.http.security import authenticate
from api.local_mode.backend import LocalMode
from api.settings import Settings
from api.store.db import get_db
from api.store.models import Job, User

SessionDep = Annotated[Session, Depends(get_db)]
bearer = HTTPBearer(auto_error=False, description="a token from POST /users/{id}/tokens")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

UNAUTHORIZED = HTTPException(
    status.HTTP_401_UNAUTHORIZED,
    UNAUTHORIZED_DETAIL,
    headers={"WWW-Authenticate": "Bearer"},
)


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def current_user(request: Request, credentials: Credentials) -> User:
    found: User | None = getattr(request.state, USER_KEY, None)  # api.http.guard's lookup
    if found is not None:
        return found
    if credentials is None:
        raise UNAUTHORIZED
    user = await authenticate(request.app.state, credentials.credentials)
    if user is None:
        raise UNAUTHORIZED
    return user


CurrentUser = Annotated[User, Depends(current_user)]


def admin_user(user: CurrentUser) -> User:
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin only")
    return user


AdminUser = Annotated[User, Depends(admin_user)]


async def metrics_reader(request: Request, credentials: Credentials) -> None:
    """GET /metrics: the scrape token (settings.metrics_token) or an admin's token."""
    if credentials is None:
        raise UNAUTHORIZED
    scrape: SecretStr | None = request.app.state.settings.metrics_token
    given = credentials.credentials.encode("utf-8", "surrogatepass")
    if scrape is not None and hmac.compare_digest(given, scrape.get_secret_value().encode()):
        return
    user = await authenticate(request.app.state, credentials.credentials)
    if user is None:
        raise UNAUTHORIZED
    if user.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin or scrape token only")


MetricsReader = Annotated[None, Depends(metrics_reader)]
BackendT = TypeVar("BackendT", LocalMode, JobBackend)
UNAUTHORIZED_OR_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or invalid bearer token"},
    403: {"description": "a user's token that is not an admin's"},
}


def required_backend(backend: BackendT | None) -> BackendT:
    """`backend`, or 503 when the service runs without one (API-only)."""
    if backend is None:
        raise unavailable("no cluster backend running")
    return backend


async def get_local(request: Request) -> LocalMode:
    local: LocalMode | None = request.app.state.local
    return required_backend(local)


LocalDep = Annotated[LocalMode, Depends(get_local)]


async def get_backend(request: Request) -> JobBackend:
    backend: JobBackend | None = request.app.state.backend
    return required_backend(backend)


# Where jobs run: local mode's LiveCluster or, in cluster mode, Kubernetes (api.backends).
BackendDep = Annotated[JobBackend, Depends(get_backend)]


async def get_backend_if_any(request: Request) -> JobBackend | None:
    backend: JobBackend | None = request.app.state.backend
    return backend


# The same, or None when no backend runs (API-only): for routes that work without one.
MaybeBackendDep = Annotated[JobBackend | None, Depends(get_backend_if_any)]


QueryT = TypeVar("QueryT", bound=Select[*tuple[Any, ...]])  # any columns


def can_see(user: User, tenant: str) -> bool:
    """Tenancy: a user acts on its own tenant's objects only; an admin on all."""
    return user.role == "admin" or user.tenant == tenant


def visible_jobs(query: QueryT, user: User, tenant: str | None) -> QueryT:
    """`query` (over Job) narrowed to the jobs `user` may see, and to `tenant` if given:
    a user its own tenant's, an admin any; 403 for a user naming another tenant."""
    return visible_to(query, user, tenant, Job.tenant)


# The 403 a route declares when its `tenant` filter goes through `check_tenant_filter`.
TENANT_FILTER_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"description": "a user's tenant filter naming another tenant"}
}


def check_tenant_filter(user: User, tenant: str | None) -> None:
    """403 for a user whose `tenant` filter names another tenant (admins name any)."""
    if tenant is not None and not can_see(user, tenant):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only admins see another tenant's jobs")


def visible_to(
    query: QueryT, user: User, tenant: str | None, column: InstrumentedAttribute[str]
) -> QueryT:
    """`visible_jobs` for any rows that name a tenant in `column` (a tenant's samples)."""
    check_tenant_filter(user, tenant)
    if user.role != "admin":
        return query.where(column == user.tenant)
    return query if tenant is None else query.where(column == tenant)
