"""Exception handlers: a dependency that is down is a 503 with a message, never a 500;
a 405 lists every method its path takes.

Installed by `create_app`. The database session is rolled back by its context
manager before these run, so a failed request leaves nothing half-written.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import kombu.exceptions
import psycopg.errors
import redis.exceptions
from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from sqlalchemy import exc as sa
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

from api.backends import BackendUnavailable
from api.store.db import DatabaseNotAnswering

log = logging.getLogger(__name__)

DB_DOWN = (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError, sa.TimeoutError)
BROKER_DOWN = (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError)
INPUT_SHOWN_CHARS = 200  # of a refused input echoed in a 422 (the field names the rest)
TRUNCATED = "... (truncated)"


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


# What a client is told of a database or broker error: the kind, never the driver's
# text, which carries SQL, parameters, server paths and the database's host and port
# (logged here for the operator instead).
DB_DOWN_DETAIL = "database unavailable"
DB_TIMEOUT_DETAIL = "database unavailable: no answer within the time limit"
BROKER_DOWN_DETAIL = "task broker unavailable"
RETRY_AFTER_S = 5  # a hint in 503s: a database or broker back up is seen at once
RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_S)}  # on every 503 the service answers
# The database's own timeouts (statement_timeout, lock_timeout), libpq's connect
# timeout, ours on a silent server (api.store.db), and SQLite's busy timeout ("database is locked").
TIMED_OUT = (
    psycopg.errors.QueryCanceled,
    psycopg.errors.LockNotAvailable,
    psycopg.errors.ConnectionTimeout,  # a server that accepts but never answers the startup
    DatabaseNotAnswering,
)


def timed_out(exc: BaseException) -> bool:
    """Whether a database error is a time limit running out (api.store.db's limits)."""
    if isinstance(exc, sa.TimeoutError):  # no free connection in the pool in time
        return True
    orig = getattr(exc, "orig", None)
    return isinstance(orig, TIMED_OUT) or "database is locked" in str(orig)


async def database_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", exc)
    detail = DB_TIMEOUT_DETAIL if timed_out(exc) else DB_DOWN_DETAIL
    return JSONResponse({"detail": detail}, status_code=503, headers=RETRY_AFTER)


async def broker_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("broker unavailable: %s", exc)
    return JSONResponse({"detail": BROKER_DOWN_DETAIL}, status_code=503, headers=RETRY_AFTER)


async def bad_value(request: Request, exc: Exception) -> JSONResponse:
    # Schemas bound every value, so this is a value the database still refused.
    log.warning("value refused by the database: %s", exc)
    return JSONResponse({"detail": "value refused by the database"}, status_code=422)


async def conflict(request: Request, exc: Exception) -> JSONResponse:
    log.warning("conflict: %s", exc)
    constraint = getattr(getattr(getattr(exc, "orig", None), "diag", None), "constraint_name", None)
    shown = f" ({constraint})" if isinstance(constraint, str) else ""
    return JSONResponse({"detail": f"conflicts with existing data{shown}"}, status_code=409)


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, with the refused input made JSON-safe: a body may carry NaN or
    Infinity (Python's JSON reader takes them), which the schemas refuse and which the
    default handler then fails to echo back (a 500)."""
    assert isinstance(exc, RequestValidationError)
    shown = [{**e, "input": _shortened(e["input"])} if "input" in e else e for e in exc.errors()]
    return JSONResponse({"detail": _json_safe(jsonable_encoder(shown))}, status_code=422)


def _shortened(value: Any) -> Any:
    """A refused input as sent if short, else its first INPUT_SHOWN_CHARS (as JSON text
    for a list or object): a 20 MiB body must not come back as a 20 MiB 422."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value if len(value) <= INPUT_SHOWN_CHARS else value[:INPUT_SHOWN_CHARS] + TRUNCATED
    if isinstance(value, dict | list | tuple):
        text = json.dumps(jsonable_encoder(value), default=str)
        return value if len(text) <= INPUT_SHOWN_CHARS else text[:INPUT_SHOWN_CHARS] + TRUNCATED
    return value


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


async def backend_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("job backend unavailable: %s", exc)
    return JSONResponse({"detail": one_line(exc)}, status_code=503, headers=RETRY_AFTER)


def unavailable(detail: str) -> HTTPException:
    """A 503 a route raises itself (no backend, Kubernetes or the broker down), with
    the same Retry-After as the handlers' 503s."""
    return HTTPException(503, detail, headers=RETRY_AFTER)


async def http_error(request: Request, exc: Exception) -> Response:
    """FastAPI's own answer, but a 405's `Allow` lists the methods of every route of
    the path: Starlette names only those of the first route it tried, and FastAPI
    makes a route per method."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405:
        allow = ", ".join(sorted(allowed_methods(request.app, request.scope)))
        exc = StarletteHTTPException(
            405, exc.detail, headers={**(exc.headers or {}), "Allow": allow}
        )
    return await http_exception_handler(request, exc)


def allowed_methods(app: Starlette, scope: Scope) -> set[str]:
    methods: set[str] = set()
    for route in iter_route_contexts(app.routes):
        if route.methods:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                methods |= route.methods
    return methods


def install(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(BackendUnavailable, backend_down)
    for cls in DB_DOWN:
        app.add_exception_handler(cls, database_down)
    for broker_cls in BROKER_DOWN:
        app.add_exception_handler(broker_cls, broker_down)
    app.add_exception_handler(sa.DataError, bad_value)
    app.add_exception_handler(sa.IntegrityError, conflict)
