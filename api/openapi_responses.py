"""The answers every route can give without saying so, declared in the OpenAPI document.

Installed by `create_app`; applied to the document each time it is built, so routes
added by any router are covered. What each operation can answer is read from the
code that answers it, not listed by hand (a route's own description is kept):

- 401 and 503: every route under the API prefix (api.http.guard checks the bearer token,
  in the database, before the route runs), except a job's metrics report (its own
  token; a wrong one is a 404), and any route that depends on api.deps.current_user or
  metrics_reader;
- 403: routes that depend on api.deps.admin_user or metrics_reader, and those that
  declare a 403 themselves;
- 400 and 413: routes that take a body (one that cannot be read as its content type;
  one larger than the limit, api.http.guard).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from api.deps import admin_user, current_user, metrics_reader
from api.http.guard import JOB_REPORT
from api.schemas.common import Message

UNAUTHORIZED = "missing or invalid bearer token"
FORBIDDEN = "the token's user may not do this (admins only)"
UNAVAILABLE = "the database is unavailable or did not answer within its time limit"
UNREADABLE = "the body cannot be read as its content type"
TOO_LARGE = "the body is larger than the service's limit"
AUTHENTICATED = {current_user, metrics_reader}
ADMINS_ONLY = {admin_user, metrics_reader}
MESSAGE_REF = {"$ref": "#/components/schemas/Message"}


def install(app: FastAPI, prefix: str) -> None:
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        doc = build()  # FastAPI's, cached until the routes change
        declare(doc, app, prefix)
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def declare(doc: dict[str, Any], app: FastAPI, prefix: str) -> None:
    """Add 400, 401, 403, 413 and 503 (a Message body) where they can be answered."""
    calls = _calls_by_operation(app)
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            deps = calls.get((path, method.upper()), set())
            responses = operation.setdefault("responses", {})
            guarded = path.startswith(prefix + "/") and not (
                method == "post" and JOB_REPORT.fullmatch(path.removeprefix(prefix))
            )
            if guarded or deps & AUTHENTICATED:
                _add(responses, "401", UNAUTHORIZED)
                _add(responses, "503", UNAVAILABLE)
            if "403" in responses or deps & ADMINS_ONLY:
                _add(responses, "403", FORBIDDEN)
            if "requestBody" in operation:
                _add(responses, "400", UNREADABLE)
                _add(responses, "413", TOO_LARGE)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Message", Message.model_json_schema())


def _add(responses: dict[str, Any], code: str, description: str) -> None:
    response = responses.setdefault(code, {})
    if not response.get("description"):
        response["description"] = description
    response.setdefault("content", {"application/json": {"schema": MESSAGE_REF}})


def _calls_by_operation(app: FastAPI) -> dict[tuple[str, str], set[Any]]:
    found: dict[tuple[str, str], set[Any]] = {}
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            calls = set(_calls(route.dependant))
            for method in route.methods or ():
                found[(str(context.path_format), method)] = calls
    return found


def _calls(dependant: Dependant) -> Iterator[Any]:
    for dep in dependant.dependencies:
        if dep.call is not None:
            yield dep.call
        yield from _calls(dep)
