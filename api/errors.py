"""Exception handlers: a dependency that is down is a 503 with a message, never a 500.

Installed by `create_app`. The database session is rolled back by its context
manager before these run, so a failed request leaves nothing half-written.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import kombu.exceptions
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa

from api.backends import BackendUnavailable

log = logging.getLogger(__name__)

DB_DOWN = (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError, sa.TimeoutError)
BROKER_DOWN = (kombu.exceptions.OperationalError, redis.exceptions.ConnectionError)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


async def database_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable: %s", exc)
    return JSONResponse({"detail": f"database unavailable: {one_line(exc)}"}, status_code=503)


async def broker_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("broker unavailable: %s", exc)
    return JSONResponse({"detail": f"task broker unavailable: {one_line(exc)}"}, status_code=503)


async def bad_value(request: Request, exc: Exception) -> JSONResponse:
    # Schemas bound every value, so this is a value the database still refused.
    return JSONResponse(
        {"detail": f"value refused by the database: {one_line(exc)}"}, status_code=422
    )


async def conflict(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": f"conflicts with existing data: {one_line(exc)}"}, status_code=409
    )


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, with the refused input made JSON-safe: a body may carry NaN or
    Infinity (Python's JSON reader takes them), which the schemas refuse and which the
    default handler then fails to echo back (a 500)."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": _json_safe(jsonable_encoder(exc.errors()))}, status_code=422)


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
    return JSONResponse({"detail": one_line(exc)}, status_code=503)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(BackendUnavailable, backend_down)
    for cls in DB_DOWN:
        app.add_exception_handler(cls, database_down)
    for broker_cls in BROKER_DOWN:
        app.add_exception_handler(broker_cls, broker_down)
    app.add_exception_handler(sa.DataError, bad_value)
    app.add_exception_handler(sa.IntegrityError, conflict)
