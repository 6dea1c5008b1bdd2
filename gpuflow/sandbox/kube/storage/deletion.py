"""Deletion as the real server does it: finalizers, graceful pods, namespaces, GC.

Called by store.Store for DELETE (`delete`), for an update that removes the last
finalizer of an object being deleted (`remove`), and for a write that leaves an
object with only dangling owner references (`collect_if_orphaned`). An object with
finalizers gets `deletionTimestamp` and stays until its last finalizer is removed;
once an object is really gone its dependents (by ownerReferences uid) are deleted
when no owner of theirs remains, or lose the dangling reference when one does (the
garbage collector's background cascade, done synchronously here right after the
owner's DELETED event). `propagationPolicy: Orphan` strips the owner reference from
dependents; `Foreground` deletes dependents first. Deleting a namespace deletes its
contents and the namespace goes when it is empty; deleting a CRD, its objects.
Runs under the store's lock.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuflow.sandbox.kube.resources import CRD_KEY, NAMESPACE_KEY, Registry
from gpuflow.sandbox.kube.storage.history import Key
from gpuflow.sandbox.kube.storage.objects import Objects, now_rfc3339

Obj = dict[str, Any]


@dataclass(frozen=True)
class DeleteOptions:
    propagation: str = "Background"
    grace_period_s: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False


class Deleter:
    """Deletes, marks for deletion and garbage-collects the objects in `objects`."""

    def __init__(self, objects: Objects, registry: Registry, graceful_pods: bool) -> None:
        self._objects = objects
        self._registry = registry
        self._graceful_pods = graceful_pods  # see store.Store.graceful_pods

    def delete(self, key: Key, obj: Obj, opts: DeleteOptions) -> tuple[bool, Obj]:
        """Delete now, or mark for deletion; returns (gone, object as last written)."""
        meta = obj["metadata"]
        if opts.propagation == "Orphan":
            self._orphan(meta["uid"])
        elif opts.propagation == "Foreground":
            self._collect(meta["uid"], force=True)
        if key == NAMESPACE_KEY:
            return self._delete_namespace(obj)
        grace = self._grace_period(key, obj, opts)
        if meta.get("finalizers") or grace:
            if meta.get("deletionTimestamp"):
                return False, obj
            marked = copy.deepcopy(obj)
            marked["metadata"].update(
                deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=grace
            )
            self._objects.commit(key, "MODIFIED", marked, obj)
            return False, marked
        final = copy.deepcopy(obj)
        self.remove(key, final)
        return True, final

    def _grace_period(self, key: Key, obj: Obj, opts: DeleteOptions) -> int:
        if not (self._graceful_pods and key == ("", "pods") and obj["spec"].get("nodeName")):
            return 0
        if opts.grace_period_s is not None:
            return opts.grace_period_s
        return int(obj["spec"].get("terminationGracePeriodSeconds", 30))

    def remove(self, key: Key, obj: Obj) -> None:
        """Really remove: DELETED event, indexes, then whatever hung on this object."""
        meta = obj["metadata"]
        ns, uid = meta.get("namespace", ""), meta["uid"]
        old = self._objects.drop(key, obj)
        self._objects.commit(key, "DELETED", obj, old)
        if key == CRD_KEY:
            self._drop_custom_resources(obj)
        self._collect(uid)
        if ns:
            self._finish_namespace(ns)

    def _drop_custom_resources(self, crd: Obj) -> None:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for obj in list(self._objects.of((group, plural)).values()):
            self.remove((group, plural), copy.deepcopy(obj))
        self._registry.remove_crd(crd["metadata"]["name"])

    def _delete_namespace(self, ns_obj: Obj) -> tuple[bool, Obj]:
        name = ns_obj["metadata"]["name"]
        marked = ns_obj
        if not ns_obj["metadata"].get("deletionTimestamp"):
            marked = copy.deepcopy(ns_obj)
            marked["metadata"]["deletionTimestamp"] = now_rfc3339()
            marked["status"] = {"phase": "Terminating"}
            self._objects.commit(NAMESPACE_KEY, "MODIFIED", marked, ns_obj)
        for key, objects in self._objects.types():
            for (ns, _), obj in sorted(objects.items()):
                if ns == name:
                    self.delete(key, obj, DeleteOptions())
        self._finish_namespace(name)
        current = self._objects.of(NAMESPACE_KEY).get(("", name))
        return current is None, current or marked

    def _finish_namespace(self, name: str) -> None:
        ns_obj = self._objects.of(NAMESPACE_KEY).get(("", name))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            return
        if ns_obj["metadata"].get("finalizers"):
            return
        if any(ns == name for _, objects in self._objects.types() for ns, _ in objects):
            return
        self.remove(NAMESPACE_KEY, copy.deepcopy(ns_obj))

    def _owners_alive(self, obj: Obj) -> list[Obj]:
        return [
            r
            for r in obj["metadata"].get("ownerReferences") or []
            if self._objects.exists(r.get("uid"))
        ]

    def _collect(self, owner_uid: str, force: bool = False) -> None:
        """Garbage-collect the dependents of an owner that is gone (or going, if force)."""
        for dep_uid in self._objects.take_dependents(owner_uid):
            located = self._objects.locate(dep_uid)
            if located is None:
                continue
            key, ns, name = located
            dep = self._objects.of(key)[(ns, name)]
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in self._owners_alive(dep) if not (force and r["uid"] == owner_uid)]
            if alive:
                self._set_owner_refs(key, dep, alive)
            elif any(r.get("uid") == owner_uid for r in refs):
                self.delete(key, dep, DeleteOptions())

    def collect_if_orphaned(self, obj: Obj) -> None:
        """A dependent whose owners do not exist is collected, as the real GC does."""
        refs = obj["metadata"].get("ownerReferences")
        if refs and not self._owners_alive(obj):
            located = self._objects.locate(obj["metadata"]["uid"])
            assert located is not None  # just committed
            current = self._objects.of(located[0])[located[1:]]
            self.delete(located[0], current, DeleteOptions())

    def _orphan(self, owner_uid: str) -> None:
        for dep_uid in self._objects.take_dependents(owner_uid):
            located = self._objects.locate(dep_uid)
            if located is not None:
                dep = self._objects.of(located[0])[located[1:]]
                refs = [
                    r
                    for r in dep["metadata"].get("ownerReferences") or []
                    if r.get("uid") != owner_uid
                ]
                self._set_owner_refs(located[0], dep, refs)

    def _set_owner_refs(self, key: Key, obj: Obj, refs: Iterable[Obj]) -> None:
        new = copy.deepcopy(obj)
        new["metadata"]["ownerReferences"] = list(refs)
        if not new["metadata"]["ownerReferences"]:
            del new["metadata"]["ownerReferences"]
        if new != obj:
            self._objects.commit(key, "MODIFIED", new, obj)
