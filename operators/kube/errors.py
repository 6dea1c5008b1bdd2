"""How the Kubernetes API's failures are named, read and weighed.

The status codes callers act on (CONFLICT, NOT_FOUND, GONE, ALREADY_EXISTS),
`API_ERRORS` (what a request can raise: an error response or no answer at all),
`status_code` and `error_message` (the server's one-line message, never the client's
dump), and how loud each is logged (`ERROR_LEVELS`, `NETWORK`). Used by
operators.kube.KubeApi, which logs every failure once, and by every caller that
catches one (the operator's modules, the node agent, the API service's cluster mode),
mostly through operators.kube's re-exports.
"""

from __future__ import annotations

import json
import logging

import urllib3
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from operators.logs import one_line

CONFLICT, NOT_FOUND, GONE, ALREADY_EXISTS = 409, 404, 410, 409
FORBIDDEN = 403  # RBAC refused the request: the message names the verb and resource
# How loud an error response is: a 404 is an answer its caller acts on (a pod gone,
# no Lease yet, no CRD: the caller says what it means), a 409 or 410 is retried
# (a conflict re-read, a watch too old relisted); anything else is a warning.
ERROR_LEVELS = {NOT_FOUND: logging.DEBUG, CONFLICT: logging.INFO, GONE: logging.INFO}
NETWORK = "none"  # the code label of a request that got no HTTP answer

# What a request can raise: an error response, or no answer at all.
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)

__all__ = [
    "ALREADY_EXISTS",
    "API_ERRORS",
    "CONFLICT",
    "ERROR_LEVELS",
    "FORBIDDEN",
    "GONE",
    "NETWORK",
    "NOT_FOUND",
    "ApiException",
    "error_message",
    "status_code",
]


def status_code(exc: BaseException) -> int | None:
    return int(exc.status) if isinstance(exc, ApiException) and exc.status else None


def error_message(exc: BaseException) -> str:
    """The server's one-line message of an error response (the Status object's
    `message`), else the exception's first line; never the headers and body dump
    that `str(ApiException)` gives."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "")
        except (TypeError, ValueError):
            body = None
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
        return str(exc.reason or "")
    return one_line(exc)
