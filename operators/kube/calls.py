"""How every Kubernetes API call is made: raw JSON, and each failure reported once.

`KubeCalls` holds the client's API classes and the error reporting each call goes
through (`_call`, `custom_call`): an error response or a failed connection is logged
as one line `api error verb=.. resource=.. code=.. message=..` and passed to
`on_error` (the operator's metrics), then raised to the caller, who acts on the code
but does not log it again. Responses are read raw (`read_json`, `drain`), skipping the
client's model classes, which cost about a millisecond per pod to build. The calls
themselves are its subclasses' (kube_dljobs.DLJobCalls, kube.KubeApi).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from operators import crd
from operators.kube.errors import (
    API_ERRORS,
    ERROR_LEVELS,
    NETWORK,
    ApiException,
    error_message,
    status_code,
)
from operators.logs import emit

# The logger the `api error` lines have always carried (JsonFormatter's "logger").
log = logging.getLogger("operators.kube")

Obj = dict[str, Any]
ErrorHook = Callable[[str, str, str], None]  # (verb, resource, code)


class KubeCalls:
    """The client's CoreV1Api, CustomObjectsApi and CoordinationV1Api, and the error
    reporting every call made through them has."""

    def __init__(
        self, client: Any, namespace: str | None = None, on_error: ErrorHook | None = None
    ) -> None:
        self.client = client
        self.namespace = namespace  # None: all namespaces
        self.on_error = on_error
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.coordination = kubernetes.client.CoordinationV1Api(client)

    def _json_unless(
        self, absent: int, verb: str, resource: str, request: Callable[[], Any]
    ) -> Obj | None:
        """`request()` (made with _preload_content=False) read as JSON, or None when the
        server answers `absent` (NOT_FOUND: gone; ALREADY_EXISTS: there already)."""
        try:
            with self._call(verb, resource):
                resp = request()
        except ApiException as exc:
            if exc.status == absent:
                return None
            raise
        return read_json(resp)

    @contextmanager
    def _call(self, verb: str, resource: str) -> Iterator[None]:
        """Report an error response or failed connection of the request made inside,
        then let it propagate to the caller."""
        try:
            yield
        except API_ERRORS as exc:
            code = status_code(exc)
            level = ERROR_LEVELS.get(code, logging.WARNING) if code else logging.WARNING
            label = str(code) if code else NETWORK
            msg = error_message(exc)
            emit(log, level, "api error", verb=verb, resource=resource, code=label, message=msg)
            if self.on_error is not None:
                self.on_error(verb, resource, label)
            raise

    def custom_call(self, verb: str, resource: str) -> AbstractContextManager[None]:
        """The error reporting every call here has, for the modules that make calls
        of their own on a custom resource (operators/quotas/resources.py)."""
        return self._call(verb, resource)


def crd_args() -> dict[str, str]:
    """The CustomObjectsApi arguments that name the DLJob resource."""
    return {"group": crd.GROUP, "version": crd.VERSION, "plural": crd.PLURAL}


def read_json(resp: Any) -> Obj:
    """A raw response (`_preload_content=False`) read whole, as JSON."""
    data: Obj = json.loads(drain(resp))
    return data


def drain(resp: Any) -> bytes:
    """Read a raw response whole and give its connection back to the pool (an unread
    response would keep the socket busy, and leak it when collected)."""
    try:
        body: bytes = resp.data
        return body
    finally:
        resp.release_conn()
