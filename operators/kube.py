"""The Kubernetes API as the operator and node agent use it: plain JSON dicts in and out.

The one module that imports the official `kubernetes` client. Reads and watches ask
for the raw JSON (`_preload_content=False`) and skip the client's model classes,
which cost about a millisecond per pod to build; writes send dicts. Called by the
informers (list, watch), the backend (pods, services, events, DLJob status), the
leader elector (Lease) and the node agent (its Node).

`update_status` is the optimistic-concurrency loop every status write goes through:
the new status is computed from the object as read, sent with its resourceVersion,
and on 409 Conflict computed again from a fresh read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes  # type: ignore[import-untyped]
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]
from kubernetes.watch.watch import iter_resp_lines  # type: ignore[import-untyped]

from operators import crd

Obj = dict[str, Any]
CONFLICT, NOT_FOUND, GONE, ALREADY_EXISTS = 409, 404, 410, 409
STATUS_RETRIES = 8

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


@dataclass(frozen=True)
class Resource:
    """A kind the operator lists and watches, cluster-wide."""

    name: str  # "dljobs", "pods", "nodes"
    label_selector: str | None = None


class KubeApi:
    """Thin typed wrapper over CoreV1Api, CustomObjectsApi and CoordinationV1Api."""

    def __init__(self, client: Any, namespace: str | None = None) -> None:
        self.client = client
        self.namespace = namespace  # None: all namespaces
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.coordination = kubernetes.client.CoordinationV1Api(client)

    # -- list and watch ------------------------------------------------------------------

    def _list_call(self, res: Resource) -> tuple[Callable[..., Any], dict[str, Any]]:
        kw: dict[str, Any] = {}
        if res.label_selector:
            kw["label_selector"] = res.label_selector
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
        raise ValueError(f"unknown resource {res.name}")

    def list_objects(self, res: Resource) -> tuple[list[Obj], str]:
        """All objects and the list's resourceVersion (to watch from)."""
        fn, kw = self._list_call(res)
        data = _json(fn(**kw, _preload_content=False))
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion", ""))

    def watch(self, res: Resource, resource_version: str, timeout_s: int) -> Iterator[Obj]:
        """Watch events ({type, object}) from `resource_version`; ends at the timeout.

        An ERROR event is raised as ApiException with its code (410: relist)."""
        fn, kw = self._list_call(res)
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
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                yield event
        finally:
            resp.close()
            resp.release_conn()

    # -- pods, services, events, nodes ---------------------------------------------------

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        return _json(self.core.create_namespaced_pod(namespace, body, _preload_content=False))

    def delete_pod(self, namespace: str, name: str, grace_s: int | None) -> None:
        """Delete a pod; gone already is fine."""
        body = {"gracePeriodSeconds": grace_s} if grace_s is not None else None
        try:
            _drain(
                self.core.delete_namespaced_pod(
                    name, namespace, body=body, grace_period_seconds=grace_s, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != NOT_FOUND:
                raise

    def create_service(self, namespace: str, body: Obj) -> Obj | None:
        """Create a service; None if it exists already."""
        try:
            resp = self.core.create_namespaced_service(namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status == ALREADY_EXISTS:
                return None
            raise
        return _json(resp)

    def create_event(self, namespace: str, body: Obj) -> None:
        _drain(self.core.create_namespaced_event(namespace, body, _preload_content=False))

    def get_node(self, name: str) -> Obj:
        return _json(self.core.read_node(name, _preload_content=False))

    def patch_node(self, name: str, patch: Obj) -> Obj:
        return _json(self.core.patch_node(name, patch, _preload_content=False))

    def create_node(self, body: Obj) -> Obj:
        return _json(self.core.create_node(body, _preload_content=False))

    # -- DLJobs ------------------------------------------------------------------------------

    def get_dljob(self, namespace: str, name: str) -> Obj:
        fn = self.custom.get_namespaced_custom_object
        return _json(fn(**_crd_args(), namespace=namespace, name=name, _preload_content=False))

    def list_dljobs(self, namespace: str) -> tuple[list[Obj], str]:
        fn = self.custom.list_namespaced_custom_object
        data = _json(fn(**_crd_args(), namespace=namespace, _preload_content=False))
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion", ""))

    def create_dljob(self, namespace: str, body: Obj) -> Obj:
        fn = self.custom.create_namespaced_custom_object
        return _json(fn(**_crd_args(), namespace=namespace, body=body, _preload_content=False))

    def delete_dljob(self, namespace: str, name: str) -> bool:
        """Delete a DLJob (its finalizer lets the operator clean up first); False if it
        was gone already."""
        fn = self.custom.delete_namespaced_custom_object
        try:
            # Read to the end, so that the connection goes back to the pool.
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

    # -- Leases --------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            resp = self.coordination.read_namespaced_lease(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        return _json(resp)

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.create_namespaced_lease
        return _json(fn(namespace, body, _preload_content=False))

    def replace_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.replace_namespaced_lease
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
