"""The 422 of a value a route refuses itself: FastAPI's validation error, naming the
field as the schemas' own refusals do (`loc`, `type`, `msg`, `input`).

Raised by the routes, the job backends (api.cluster_mode.backend), the idempotency keys
(api.store.idempotency) and the query guard (api.http.query_guard) for what the schemas cannot
check (the cluster's size, a reused key, an unknown policy, a quota tree); answered by
api.http.errors.invalid_request like any other RequestValidationError. It imports nothing
of the project, so that any module of the API can raise it without an import cycle
(api.http.errors imports the backends, which import the idempotency keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi.exceptions import RequestValidationError

Loc = tuple[str | int, ...]  # where the value was: ("body", "num_gpus"), ("query", "limit")


def field_error(loc: Loc, msg: str, value: object, kind: str = "value_error") -> dict[str, Any]:
    """One refusal: `value` at `loc`, refused with `msg` (`kind`: the error's type)."""
    return {"loc": loc, "type": kind, "msg": msg, "input": value}


def invalid(loc: Loc, msg: str, value: object, kind: str = "value_error") -> RequestValidationError:
    """The 422 of one refused value (the caller raises it)."""
    return invalid_all([field_error(loc, msg, value, kind)])


def invalid_all(errors: Iterable[dict[str, Any]]) -> RequestValidationError:
    """The 422 of several refusals at once (each from `field_error`)."""
    return RequestValidationError(list(errors))
