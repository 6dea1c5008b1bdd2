"""Calls on the cluster-scoped Quota resources (and on the deprecated Queue ones, the
same calls on the other plural): get, create, replace, delete, status replace, and the
listing of both kinds as one (`list_quotas`). Used by the operator's reader and status
writes (operators/quotas/tree.py), the API's quota store in cluster mode
(api/quotas/store.py) and `gpuflow quotas migrate` (operators/quotas/migrate.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from operators import crd
from operators.kube import NOT_FOUND, KubeApi, Resource

Obj = dict[str, Any]


class QuotaApi:
    """Quota resources (or, with `plural=crd.LEGACY_QUEUE_PLURAL`, the deprecated Queue
    ones) through one KubeApi (its client and its error reporting)."""

    def __init__(self, kube: KubeApi, plural: str = crd.QUOTA_PLURAL) -> None:
        self.kube = kube
        self.plural = plural
        self._args = {"group": crd.GROUP, "version": crd.VERSION, "plural": plural}

    def get(self, name: str) -> Obj | None:
        """The object, or None when there is none of that name."""
        fn = self.kube.custom.get_cluster_custom_object
        try:
            with self.kube.custom_call("get", self.plural):
                return _json(fn(**self._args, name=name, _preload_content=False))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def create(self, body: Obj) -> Obj:
        fn = self.kube.custom.create_cluster_custom_object
        with self.kube.custom_call("create", self.plural):
            return _json(fn(**self._args, body=body, _preload_content=False))

    def replace(self, body: Obj) -> Obj:
        """Replace metadata and spec; `body` carries the resourceVersion it read."""
        fn = self.kube.custom.replace_cluster_custom_object
        name = body["metadata"]["name"]
        with self.kube.custom_call("update", self.plural):
            return _json(fn(**self._args, name=name, body=body, _preload_content=False))

    def replace_status(self, body: Obj) -> Obj:
        fn = self.kube.custom.replace_cluster_custom_object_status
        name = body["metadata"]["name"]
        with self.kube.custom_call("update", f"{self.plural}/status"):
            return _json(fn(**self._args, name=name, body=body, _preload_content=False))

    def delete(self, name: str) -> bool:
        """Delete the object; False when there was none."""
        fn = self.kube.custom.delete_cluster_custom_object
        try:
            with self.kube.custom_call("delete", self.plural):
                _json(fn(**self._args, name=name, _preload_content=False))
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return False
            raise
        return True


# The kinds a quota tree is read from, the current one first.
KINDS = ((crd.QUOTA_PLURAL, crd.QUOTA_KIND), (crd.LEGACY_QUEUE_PLURAL, crd.LEGACY_QUEUE_KIND))


def legacy(kube: KubeApi) -> QuotaApi:
    """The calls on the deprecated Queue resources."""
    return QuotaApi(kube, crd.LEGACY_QUEUE_PLURAL)


def is_legacy(obj: Obj) -> bool:
    """Whether a listed object is a deprecated Queue (a Quota otherwise)."""
    return obj.get("kind") == crd.LEGACY_QUEUE_KIND


@dataclass(frozen=True)
class Listing:
    """Both kinds listed as one: every Quota, then each Queue no Quota of its name
    replaces (`objects`, in name order); the Queues among them (`legacy`, names); the
    kinds whose CRD the server does not serve (`missing`, plurals)."""

    objects: list[Obj]
    legacy: list[str]
    missing: list[str]


def list_kind(kube: KubeApi, plural: str) -> list[Obj] | None:
    """Every object of one kind; None when its CRD is not installed."""
    try:
        objs, _ = kube.list_objects(Resource(plural))
    except ApiException as exc:
        if exc.status != NOT_FOUND:
            raise
        return None
    return objs


def list_quotas(kube: KubeApi) -> Listing:
    """Quotas and the deprecated Queues as one tree's objects. A kind whose CRD is not
    installed lists as none; any other error is the caller's (KubeApi logged it)."""
    found: dict[str, list[Obj]] = {}
    missing = []
    for plural, kind in KINDS:
        objs = list_kind(kube, plural)
        if objs is None:
            missing.append(plural)
        found[plural] = [{**o, "kind": o.get("kind") or kind} for o in objs or []]
    by_name = {str(o["metadata"]["name"]): o for o in found[crd.LEGACY_QUEUE_PLURAL]}
    for obj in found[crd.QUOTA_PLURAL]:
        by_name[str(obj["metadata"]["name"])] = obj  # a Quota wins over its old Queue
    objects = [by_name[n] for n in sorted(by_name)]
    return Listing(objects, [str(o["metadata"]["name"]) for o in objects if is_legacy(o)], missing)


def _json(resp: Any) -> Obj:
    """A raw response read whole as JSON, its connection given back to the pool."""
    try:
        data: Obj = json.loads(resp.data)
        return data
    finally:
        resp.release_conn()
