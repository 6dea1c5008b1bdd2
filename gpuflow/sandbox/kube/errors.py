"""Kubernetes `Status` errors as the real API server words them.

Raised anywhere in the test server (store, schema, patch, routing) and turned into a
`kind: Status` response body by `handler.py`. Messages and reasons follow
k8s.io/apimachinery/pkg/api/errors so that clients which parse them (kubectl prints
`message`, the Python client raises `ApiException(status=code)`) see what they would see
against a real cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An API failure carried to the HTTP layer as a `Status` object."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(qualified: tuple[str, str], name: str) -> dict[str, Any]:
    """Details as `NewNotFound` and friends fill them: kind is the *resource* (plural)."""
    group, plural = qualified
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _resource_name(qualified: tuple[str, str]) -> str:
    group, plural = qualified
    return f"{plural}.{group}" if group else plural


def not_found(qualified: tuple[str, str], name: str) -> ApiError:
    msg = f'{_resource_name(qualified)} "{name}" not found'
    return ApiError(404, "NotFound", msg, _details(qualified, name))


def already_exists(qualified: tuple[str, str], name: str) -> ApiError:
    msg = f'{_resource_name(qualified)} "{name}" already exists'
    return ApiError(409, "AlreadyExists", msg, _details(qualified, name))


def conflict(qualified: tuple[str, str], name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    msg = f'Operation cannot be fulfilled on {_resource_name(qualified)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(qualified, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown "
        f"format - accepted media types include: {content_type}",
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def injected(code: int, verb: str, resource: str) -> ApiError:
    """A fault asked for by a test (`KubeServer.fail_next`)."""
    reason = REASONS.get(code, "Unknown")
    return ApiError(code, reason, f"injected {code} {reason} for {verb} {resource}")


@dataclass(frozen=True)
class FieldError:
    """One cause of a 422 Invalid, worded like field.Error in apimachinery."""

    kind: str  # Required | Invalid | TypeInvalid | NotSupported | Forbidden
    field: str
    detail: str = ""
    value: Any = None
    supported: tuple[Any, ...] = ()

    REASONS = {
        "Required": "FieldValueRequired",
        "Invalid": "FieldValueInvalid",
        "TypeInvalid": "FieldValueTypeInvalid",
        "NotSupported": "FieldValueNotSupported",
        "Forbidden": "FieldValueForbidden",
    }

    def cause_message(self) -> str:
        if self.kind == "Required":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.kind == "Forbidden":
            return f"Forbidden: {self.detail}"
        if self.kind == "NotSupported":
            options = ", ".join(render_value(v) for v in self.supported)
            return f"Unsupported value: {render_value(self.value)}: supported values: {options}"
        return f"Invalid value: {render_value(self.value)}: {self.detail}"

    def message(self) -> str:
        return f"{self.field}: {self.cause_message()}"


def render_value(value: Any) -> str:
    """Values as Go's `%#v`-ish rendering in field errors: strings quoted, numbers bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    return json.dumps(value, sort_keys=True)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid, e.g. `DLJob.gpuflow.dev "x" is invalid: spec.gpus: Invalid value: ...`."""
    qualified_kind = f"{kind}.{group}" if group else kind
    messages = [e.message() for e in errors]
    summary = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [
            {"reason": FieldError.REASONS[e.kind], "message": e.cause_message(), "field": e.field}
            for e in errors
        ],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)
