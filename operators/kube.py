"""The Kubernetes API as the operator and node agent use it: plain JSON dicts in and out.

The one module that imports the official `kubernetes` client. Reads and watches ask
for the raw JSON (`_preload_content=False`) and skip the client's model classes,
which cost about a millisecond per pod to build; writes send dicts. Called by the
informers (list, watch), the backend (pods, services, events, DLJob status), the
leader elector (Lease) and the node agent (its Node).

`update_status` is the optimistic-concurrency loop every status write goes through:
the new status is computed from the object as read, sent with its resourceVersion,
and on 409 Conflict computed again from a fresh read.

Every error response (and every failed connection) is logged here, once, as one
line `api error verb=.. resource=.. code=.. message=..` and passed to `on_error`
(the operator's metrics): callers act on the codes but do not log them again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import urllib3
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]
from kubernetes.watch.watch import iter_resp_lines  # type: ignore[import-untyped]

from operators import crd
from operators.logs import emit, one_line

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CONFLICT, NOT_FOUND, GONE, ALREADY_EXISTS = 409, 404, 410, 409
STATUS_RETRIES = 8
# How loud an error response is: a 404 is an answer its caller acts on (a pod gone,
# no Lease yet, no CRD: the caller says what it means), a 409 or 410 is retried
# (a conflict re-read, a watch too old relisted); anything else is a warning.
ERROR_LEVELS = {NOT_FOUND: logging.DEBUG, CONFLICT: logging.INFO, GONE: logging.INFO}
NETWORK = "none"  # the code label of a request that got no HTTP answer

ErrorHook = Callable[[str, str, str], None]  # (verb, resource, code)
# What a request can raise: an error response, or no answer at all.
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)

__all__ = ["ApiException", "KubeApi", "Obj", "Resource", "api_client"]


class KubeConfigError(ValueError):
    """No usable kubeconfig (or in-cluster service account): a one-line message."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from a kubeconfig file, else from the pod's service account.
    Raises KubeConfigError when neither gives a configuration."""
    config = kubernetes.client.Configuration()
    # One connection per parallel writer and per watch (operators/writer.py WRITERS).
    config.connection_pool_maxsize = 32
    if kubeconfig is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
            return kubernetes.client.ApiClient(config)
        except kubernetes.config.ConfigException:
            pass
    try:
        kubernetes.config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=config
        )
    except (kubernetes.config.ConfigException, OSError) as exc:
        where = kubeconfig or "~/.kube/config (no in-cluster service account either)"
        raise KubeConfigError(f"kubeconfig {where}: {exc}") from None
    return kubernetes.client.ApiClient(config)


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


@dataclass(frozen=True)
class Resource:
    """A kind the operator lists and watches, cluster-wide."""

    name: str  # "dljobs", "pods", "nodes", "queues"
    label_selector: str | None = None
    field_selector: str | None = None  # e.g. the node agent's spec.nodeName=<node>


class KubeApi:
    """Thin typed wrapper over CoreV1Api, CustomObjectsApi and CoordinationV1Api."""

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
        return _json(resp)

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

    # -- list and watch ------------------------------------------------------------------

    def _list_call(self, res: Resource) -> tuple[Callable[..., Any], dict[str, Any]]:
        kw: dict[str, Any] = {}
        if res.label_selector:
            kw["label_selector"] = res.label_selector
        if res.field_selector:
            kw["field_selector"] = res.field_selector
        ns = self.namespace
        if res.name == "nodes":
            return self.core.list_node, kw
        if res.name == "pods":
            if ns:
                return self.core.list_namespaced_pod, {"namespace": ns, **kw}
            return self.core.list_pod_for_all_namespaces, kw
        if res.name == "dljobs":
            if ns:
                fn = self.custom.list_namespaced_custom_object
                return fn, {**_crd_args(), "namespace": ns, **kw}
            return self.custom.list_cluster_custom_object, {**_crd_args(), **kw}
        if res.name == crd.QUEUE_PLURAL:  # cluster-scoped
            fn = self.custom.list_cluster_custom_object
            return fn, {**_crd_args(), "plural": crd.QUEUE_PLURAL, **kw}
        raise ValueError(f"unknown resource {res.name}")

    def list_objects(self, res: Resource) -> tuple[list[Obj], str]:
        """All objects and the list's resourceVersion (to watch from)."""
        fn, kw = self._list_call(res)
        with self._call("list", res.name):
            data = _json(fn(**kw, _preload_content=False))
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion", ""))

    def watch(self, res: Resource, resource_version: str, timeout_s: int) -> Iterator[Obj]:
        """Watch events ({type, object}) from `resource_version`; ends at the timeout.

        An ERROR event is raised as ApiException with its code (410: relist)."""
        fn, kw = self._list_call(res)
        with self._call("watch", res.name):
            resp = fn(
                **kw,
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_s,
                _preload_content=False,
                _request_timeout=timeout_s + 10,
            )
            try:
                for line in iter_resp_lines(resp):
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        code, message = obj.get("code", 500), obj.get("message")
                        raise ApiException(status=code, reason=message)
                    yield event
            finally:
                resp.close()
                resp.release_conn()

    # -- pods, services, events, nodes ---------------------------------------------------

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        with self._call("create", "pods"):
            return _json(self.core.create_namespaced_pod(namespace, body, _preload_content=False))

    def delete_pod(self, namespace: str, name: str, grace_s: int | None) -> None:
        """Delete a pod; gone already is fine."""
        body = {"gracePeriodSeconds": grace_s} if grace_s is not None else None
        fn = self.core.delete_namespaced_pod
        kw = {"body": body, "grace_period_seconds": grace_s, "_preload_content": False}
        try:
            with self._call("delete", "pods"):
                _drain(fn(name, namespace, **kw))
        except ApiException as exc:
            if exc.status != NOT_FOUND:
                raise

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj | None:
        """Merge-patch a pod's metadata; None if it is gone."""
        fn = self.core.patch_namespaced_pod
        return self._json_unless(
            NOT_FOUND, "patch", "pods", lambda: fn(name, namespace, patch, _preload_content=False)
        )

    def create_service(self, namespace: str, body: Obj) -> Obj | None:
        """Create a service; None if it exists already."""
        fn = self.core.create_namespaced_service
        return self._json_unless(
            ALREADY_EXISTS,
            "create",
            "services",
            lambda: fn(namespace, body, _preload_content=False),
        )

    def create_event(self, namespace: str, body: Obj) -> None:
        with self._call("create", "events"):
            _drain(self.core.create_namespaced_event(namespace, body, _preload_content=False))

    def get_node(self, name: str) -> Obj:
        with self._call("get", "nodes"):
            return _json(self.core.read_node(name, _preload_content=False))

    def patch_node(self, name: str, patch: Obj) -> Obj:
        with self._call("patch", "nodes"):
            return _json(self.core.patch_node(name, patch, _preload_content=False))

    def create_node(self, body: Obj) -> Obj:
        with self._call("create", "nodes"):
            return _json(self.core.create_node(body, _preload_content=False))

    # -- Secrets: jobs' metrics tokens, written by the API (api/metrics_secrets.py) ------

    def create_secret(self, namespace: str, body: Obj) -> Obj | None:
        """Create a Secret; None if one of that name exists already."""
        fn = self.core.create_namespaced_secret
        return self._json_unless(
            ALREADY_EXISTS, "create", "secrets", lambda: fn(namespace, body, _preload_content=False)
        )

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        fn = self.core.read_namespaced_secret
        return self._json_unless(
            NOT_FOUND, "get", "secrets", lambda: fn(name, namespace, _preload_content=False)
        )

    def replace_secret(self, body: Obj) -> Obj:
        meta, fn = body["metadata"], self.core.replace_namespaced_secret
        with self._call("update", "secrets"):
            return _json(fn(meta["name"], meta["namespace"], body, _preload_content=False))

    def delete_secret(self, namespace: str, name: str) -> None:
        with self._call("delete", "secrets"):
            _drain(self.core.delete_namespaced_secret(name, namespace, _preload_content=False))

    # -- ConfigMaps: the policy an admin chose (operators/policy_config.py) --------------

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        fn = self.core.read_namespaced_config_map
        return self._json_unless(
            NOT_FOUND, "get", "configmaps", lambda: fn(name, namespace, _preload_content=False)
        )

    def create_configmap(self, namespace: str, body: Obj) -> Obj | None:
        """Create a ConfigMap; None if one of that name exists already."""
        fn = self.core.create_namespaced_config_map
        return self._json_unless(
            ALREADY_EXISTS,
            "create",
            "configmaps",
            lambda: fn(namespace, body, _preload_content=False),
        )

    def replace_configmap(self, body: Obj) -> Obj:
        meta, fn = body["metadata"], self.core.replace_namespaced_config_map
        with self._call("update", "configmaps"):
            return _json(fn(meta["name"], meta["namespace"], body, _preload_content=False))

    # -- DLJobs ------------------------------------------------------------------------------

    def get_dljob(self, namespace: str, name: str) -> Obj:
        fn = self.custom.get_namespaced_custom_object
        with self._call("get", crd.PLURAL):
            return _json(fn(**_crd_args(), namespace=namespace, name=name, _preload_content=False))

    def list_dljobs(self, namespace: str) -> tuple[list[Obj], str]:
        fn = self.custom.list_namespaced_custom_object
        with self._call("list", crd.PLURAL):
            data = _json(fn(**_crd_args(), namespace=namespace, _preload_content=False))
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion", ""))

    def create_dljob(self, namespace: str, body: Obj) -> Obj:
        fn = self.custom.create_namespaced_custom_object
        with self._call("create", crd.PLURAL):
            return _json(fn(**_crd_args(), namespace=namespace, body=body, _preload_content=False))

    def delete_dljob(self, namespace: str, name: str) -> bool:
        """Delete a DLJob (its finalizer lets the operator clean up first); False if it
        was gone already."""
        fn = self.custom.delete_namespaced_custom_object
        try:
            # Read to the end, so that the connection goes back to the pool.
            with self._call("delete", crd.PLURAL):
                _json(fn(**_crd_args(), namespace=namespace, name=name, _preload_content=False))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return False
            raise
        return True

    def replace_dljob(self, obj: Obj) -> Obj:
        """Replace a DLJob's metadata and spec (finalizers); needs its resourceVersion."""
        meta = obj["metadata"]
        fn = self.custom.replace_namespaced_custom_object
        with self._call("update", crd.PLURAL):
            return _json(
                fn(
                    **_crd_args(),
                    namespace=meta["namespace"],
                    name=meta["name"],
                    body=obj,
                    _preload_content=False,
                )
            )

    def replace_dljob_status(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        fn = self.custom.replace_namespaced_custom_object_status
        with self._call("update", f"{crd.PLURAL}/status"):
            return _json(
                fn(
                    **_crd_args(),
                    namespace=meta["namespace"],
                    name=meta["name"],
                    body=obj,
                    _preload_content=False,
                )
            )

    def update_status(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> Obj | None:
        """Write `mutate(obj)`'s status with obj's resourceVersion; on 409 read the
        object afresh and mutate again. `mutate` returns the new object, or None when
        nothing is to change. Returns the stored object (None: unchanged or gone)."""
        meta = obj["metadata"]
        for _ in range(STATUS_RETRIES):
            new = mutate(obj)
            if new is None:
                return None
            try:
                return self.replace_dljob_status(new)
            except ApiException as exc:
                if exc.status == NOT_FOUND:
                    return None
                if exc.status != CONFLICT:
                    raise
            try:
                obj = self.get_dljob(meta["namespace"], meta["name"])
            except ApiException as exc:
                if exc.status == NOT_FOUND:
                    return None
                raise
        raise RuntimeError(f"DLJob {meta['name']}: status kept conflicting")

    def custom_call(self, verb: str, resource: str) -> AbstractContextManager[None]:
        """The error reporting every call here has, for the modules that make calls
        of their own on a custom resource (operators/queue_api.py)."""
        return self._call(verb, resource)

    def apply_crd(self, body: Obj) -> None:
        """Create a CustomResourceDefinition, or replace the one installed with it
        (`gpuflow operator run --install-crd`)."""
        ext = kubernetes.client.ApiextensionsV1Api(self.client)
        name, res = body["metadata"]["name"], "customresourcedefinitions"
        try:
            with self._call("create", res):
                _drain(ext.create_custom_resource_definition(body, _preload_content=False))
            return
        except ApiException as exc:
            if exc.status != ALREADY_EXISTS:
                raise
        with self._call("get", res):
            current = _json(ext.read_custom_resource_definition(name, _preload_content=False))
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        with self._call("update", res):
            fn = ext.replace_custom_resource_definition
            _drain(fn(name, {**body, "metadata": meta}, _preload_content=False))

    # -- Leases --------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        fn = self.coordination.read_namespaced_lease
        return self._json_unless(
            NOT_FOUND, "get", "leases", lambda: fn(name, namespace, _preload_content=False)
        )

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.create_namespaced_lease
        with self._call("create", "leases"):
            return _json(fn(namespace, body, _preload_content=False))

    def replace_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.replace_namespaced_lease
        with self._call("update", "leases"):
            return _json(fn(body["metadata"]["name"], namespace, body, _preload_content=False))


def _crd_args() -> dict[str, str]:
    return {"group": crd.GROUP, "version": crd.VERSION, "plural": crd.PLURAL}


def _json(resp: Any) -> Obj:
    data: Obj = json.loads(_drain(resp))
    return data


def _drain(resp: Any) -> bytes:
    """Read a raw response whole and give its connection back to the pool (an unread
    response would keep the socket busy, and leak it when collected)."""
    try:
        body: bytes = resp.data
        return body
    finally:
        resp.release_conn()
