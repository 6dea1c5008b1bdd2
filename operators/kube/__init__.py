"""The Kubernetes API as the operator and node agent use it: plain JSON dicts in and out.

`KubeApi` is the one object through which they call the official `kubernetes` client
(made by kube_client.api_client): how each call is made and its errors reported is
kube_calls.KubeCalls's, the DLJob and status calls are kube_dljobs.DLJobCalls's, and
the lists, watches and core kinds are here. Reads and watches ask for the raw JSON
(`_preload_content=False`); writes send dicts. Called by the informers (list, watch),
the backend (pods, services, events, DLJob status), the leader elector (Lease), the
node agent (its Node) and the API service's cluster mode (DLJobs, Secrets).

Every error response (and every failed connection) is logged once, as one line
`api error verb=.. resource=.. code=.. message=..`, and passed to `on_error` (the
operator's metrics): callers act on the codes (kube_errors) but do not log them again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.watch.watch import iter_resp_lines  # type: ignore[import-untyped]

from operators import crd
from operators.kube.calls import Obj, crd_args, drain, read_json
from operators.kube.client import KubeConfigError, api_client
from operators.kube.dljobs import DLJobCalls
from operators.kube.errors import (
    ALREADY_EXISTS,
    API_ERRORS,
    CONFLICT,
    GONE,
    NOT_FOUND,
    ApiException,
    error_message,
    status_code,
)

# The error vocabulary, the client factory and Obj live in kube_errors.py,
# kube_client.py and kube_calls.py; they are exported here too, where the operator's
# modules and the API service have always imported them from.
__all__ = [
    "ALREADY_EXISTS",
    "API_ERRORS",
    "CONFLICT",
    "GONE",
    "NOT_FOUND",
    "ApiException",
    "KubeApi",
    "KubeConfigError",
    "Obj",
    "Resource",
    "api_client",
    "error_message",
    "status_code",
]


@dataclass(frozen=True)
class Resource:
    """A kind the operator lists and watches, cluster-wide."""

    name: str  # "dljobs", "pods", "nodes", "quotas" (or the deprecated "queues")
    label_selector: str | None = None
    field_selector: str | None = None  # e.g. the node agent's spec.nodeName=<node>


class KubeApi(DLJobCalls):
    """Thin typed wrapper over CoreV1Api, CustomObjectsApi and CoordinationV1Api: lists
    and watches, pods, services, events, nodes, Secrets, ConfigMaps, Leases (and the
    DLJob calls of DLJobCalls)."""

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
                return fn, {**crd_args(), "namespace": ns, **kw}
            return self.custom.list_cluster_custom_object, {**crd_args(), **kw}
        if res.name in (crd.QUOTA_PLURAL, crd.LEGACY_QUEUE_PLURAL):  # cluster-scoped
            fn = self.custom.list_cluster_custom_object
            return fn, {**crd_args(), "plural": res.name, **kw}
        raise ValueError(f"unknown resource {res.name}")

    def list_objects(self, res: Resource) -> tuple[list[Obj], str]:
        """All objects and the list's resourceVersion (to watch from)."""
        fn, kw = self._list_call(res)
        with self._call("list", res.name):
            data = read_json(fn(**kw, _preload_content=False))
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
            return read_json(
                self.core.create_namespaced_pod(namespace, body, _preload_content=False)
            )

    def delete_pod(self, namespace: str, name: str, grace_s: int | None) -> None:
        """Delete a pod; gone already is fine."""
        body = {"gracePeriodSeconds": grace_s} if grace_s is not None else None
        fn = self.core.delete_namespaced_pod
        kw = {"body": body, "grace_period_seconds": grace_s, "_preload_content": False}
        try:
            with self._call("delete", "pods"):
                drain(fn(name, namespace, **kw))
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
            drain(self.core.create_namespaced_event(namespace, body, _preload_content=False))

    def get_node(self, name: str) -> Obj:
        with self._call("get", "nodes"):
            return read_json(self.core.read_node(name, _preload_content=False))

    def patch_node(self, name: str, patch: Obj) -> Obj:
        with self._call("patch", "nodes"):
            return read_json(self.core.patch_node(name, patch, _preload_content=False))

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """Strategic-merge-patch a Node's status: conditions merge by type, so the
        kubelet's stay."""
        with self._call("patch", "nodes/status"):
            return read_json(self.core.patch_node_status(name, patch, _preload_content=False))

    def create_node(self, body: Obj) -> Obj:
        with self._call("create", "nodes"):
            return read_json(self.core.create_node(body, _preload_content=False))

    # -- Secrets: jobs' metrics tokens, written by the API (api/cluster_mode/metrics_secrets.py)

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
            return read_json(fn(meta["name"], meta["namespace"], body, _preload_content=False))

    def delete_secret(self, namespace: str, name: str) -> None:
        with self._call("delete", "secrets"):
            drain(self.core.delete_namespaced_secret(name, namespace, _preload_content=False))

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
            return read_json(fn(meta["name"], meta["namespace"], body, _preload_content=False))

    # -- Leases --------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        fn = self.coordination.read_namespaced_lease
        return self._json_unless(
            NOT_FOUND, "get", "leases", lambda: fn(name, namespace, _preload_content=False)
        )

    def create_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.create_namespaced_lease
        with self._call("create", "leases"):
            return read_json(fn(namespace, body, _preload_content=False))

    def replace_lease(self, namespace: str, body: Obj) -> Obj:
        fn = self.coordination.replace_namespaced_lease
        with self._call("update", "leases"):
            return read_json(fn(body["metadata"]["name"], namespace, body, _preload_content=False))
