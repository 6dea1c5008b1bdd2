"""Calls on the cluster-scoped Queue resources: get, create, replace, delete, and
status replace. Used by the operator's status writes (operators/operator.py) and the
API's queue store in cluster mode (api/quotas/store.py); listing goes through
`KubeApi.list_objects(Resource("queues"))` like every other kind.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from operators import crd
from operators.kube import NOT_FOUND, KubeApi

Obj = dict[str, Any]


class QueueApi:
    """Queue resources through one KubeApi (its client and its error reporting)."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube
        self._args = {"group": crd.GROUP, "version": crd.VERSION, "plural": crd.QUEUE_PLURAL}

    def get(self, name: str) -> Obj | None:
        """The Queue, or None when there is none of that name."""
        fn = self.kube.custom.get_cluster_custom_object
        try:
            with self.kube.custom_call("get", crd.QUEUE_PLURAL):
                return _json(fn(**self._args, name=name, _preload_content=False))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def create(self, body: Obj) -> Obj:
        fn = self.kube.custom.create_cluster_custom_object
        with self.kube.custom_call("create", crd.QUEUE_PLURAL):
            return _json(fn(**self._args, body=body, _preload_content=False))

    def replace(self, body: Obj) -> Obj:
        """Replace metadata and spec; `body` carries the resourceVersion it read."""
        fn = self.kube.custom.replace_cluster_custom_object
        name = body["metadata"]["name"]
        with self.kube.custom_call("update", crd.QUEUE_PLURAL):
            return _json(fn(**self._args, name=name, body=body, _preload_content=False))

    def replace_status(self, body: Obj) -> Obj:
        fn = self.kube.custom.replace_cluster_custom_object_status
        name = body["metadata"]["name"]
        with self.kube.custom_call("update", f"{crd.QUEUE_PLURAL}/status"):
            return _json(fn(**self._args, name=name, body=body, _preload_content=False))

    def delete(self, name: str) -> bool:
        """Delete the Queue; False when there was none."""
        fn = self.kube.custom.delete_cluster_custom_object
        try:
            with self.kube.custom_call("delete", crd.QUEUE_PLURAL):
                _json(fn(**self._args, name=name, _preload_content=False))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return False
            raise
        return True


def _json(resp: Any) -> Obj:
    """A raw response read whole as JSON, its connection given back to the pool."""
    try:
        data: Obj = json.loads(resp.data)
        return data
    finally:
        resp.release_conn()
