"""Objects, resource versions, watch history, finalizers and garbage collection.

The state behind the test server (`apiserver.py` calls it once per request). One lock
guards everything; every write takes the next value of one global resourceVersion
counter (as etcd's revision does) and appends a `WatchEvent` to a bounded history that
watches read from. Stored objects are never mutated in place, so readers may hold them.

Deletion follows the real server: an object with finalizers gets `deletionTimestamp`
and stays until its last finalizer is removed; once an object is really gone its
dependents (by ownerReferences uid) are deleted when no owner of theirs remains, or lose
the dangling reference when one does (the garbage collector's background cascade, done
synchronously here right after the owner's DELETED event). `propagationPolicy: Orphan`
strips the owner reference from dependents; `Foreground` deletes dependents first.
Deleting a namespace deletes its contents and the namespace goes when it is empty.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuflow.sandbox.kube import strategy
from gpuflow.sandbox.kube.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    forbidden,
    not_found,
    unsupported_media_type,
)
from gpuflow.sandbox.kube.patch import json_patch, merge_patch, strategic_merge_patch
from gpuflow.sandbox.kube.resources import (
    CRD_KEY,
    NAMESPACE_KEY,
    Registry,
    ResourceType,
    types_from_crd,
)
from gpuflow.sandbox.kube.selectors import Matcher

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural)
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's names.SimpleNameGenerator


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    obj: Obj
    old: Obj | None


@dataclass
class WriteResult:
    obj: Obj
    warnings: list[str] = field(default_factory=list)
    code: int = 200


@dataclass(frozen=True)
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Warn"  # the server's default since 1.27


@dataclass(frozen=True)
class DeleteOptions:
    propagation: str = "Background"
    grace_period_s: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False


class Store:
    def __init__(
        self, registry: Registry, history_limit: int = 10_000, graceful_pods: bool = False
    ) -> None:
        self.registry = registry
        self.history_limit = history_limit
        # Pods bound to a node wait for a kubelet's final delete (gracePeriodSeconds=0).
        self.graceful_pods = graceful_pods
        self.cond = threading.Condition()
        self._rv = 0
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = {}
        self._by_uid: dict[str, tuple[Key, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._history: list[WatchEvent] = []
        self._compacted_rv = 0
        for ns in DEFAULT_NAMESPACES:
            self.create(self._type(NAMESPACE_KEY), "", {"metadata": {"name": ns}})

    # --- reads ----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.cond:
            return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.cond:
            return self._served(rt, self._require(rt, namespace, name))

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str,
        match: Matcher,
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[Obj], Obj]:
        with self.cond:
            list_rv, start = self._rv, ("", "")
            if continue_token:
                list_rv, start = _decode_continue(continue_token)
                if list_rv < self._compacted_rv:
                    raise expired(
                        "The provided continue parameter is too old to display a "
                        "consistent list result. You can start a new list without "
                        "the continue parameter."
                    )
            items = [
                self._served(rt, o)
                for k, o in sorted(self._objects.get(rt.key, {}).items())
                if k > start and (not namespace or k[0] == namespace) and match(o)
            ]
        meta: Obj = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = _encode_continue(list_rv, (last.get("namespace", ""), last["name"]))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return items, meta

    # --- writes ---------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: Obj, opts: WriteOptions = WriteOptions()
    ) -> WriteResult:
        obj = copy.deepcopy(body)
        strategy.check_kind(rt, obj)
        meta = obj["metadata"]
        with self.cond:
            ns = self._check_namespace(rt, namespace, meta)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    random.choices(_GENERATE_ALPHABET, k=5)
                )
            strategy.check_name(rt, obj)
            if (ns, meta["name"]) in self._objects.get(rt.key, {}):
                raise already_exists(rt.key, meta["name"])
            if meta.get("resourceVersion"):
                raise ApiError(
                    500,
                    "InternalError",
                    "resourceVersion should not be set on objects to be created",
                )
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(key, None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            if rt.namespaced:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            warnings = strategy.prepare_create(rt, obj, opts.field_validation)
            if opts.dry_run:
                return WriteResult(self._served(rt, obj), warnings, 201)
            self._commit(rt.key, "ADDED", obj, None)
            if rt.key == CRD_KEY:
                self.registry.set_crd(meta["name"], types_from_crd(obj))
            self._collect_if_orphaned(obj)
            return WriteResult(self._served(rt, obj), warnings, 201)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj,
        subresource: str = "",
        opts: WriteOptions = WriteOptions(),
    ) -> WriteResult:
        new = copy.deepcopy(body)
        strategy.check_kind(rt, new)
        with self.cond:
            old = self._require(rt, namespace, name)
            return self._update(rt, old, new, subresource, opts)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str = "",
        opts: WriteOptions = WriteOptions(),
    ) -> WriteResult:
        with self.cond:
            key = (namespace if rt.namespaced else "", name)
            old = self._objects.get(rt.key, {}).get(key)
            if content_type == "application/apply-patch+yaml":
                return self._apply(rt, namespace, name, old, patch, subresource, opts)
            if old is None:
                raise not_found(rt.key, name)
            new = self._patched(rt, old, content_type, patch)
            strategy.check_kind(rt, new)
            return self._update(rt, old, new, subresource, opts)

    def delete(
        self, rt: ResourceType, namespace: str, name: str, opts: DeleteOptions = DeleteOptions()
    ) -> WriteResult:
        with self.cond:
            obj = self._require(rt, namespace, name)
            if opts.uid and opts.uid != obj["metadata"]["uid"]:
                raise conflict(
                    rt.key,
                    name,
                    f"Precondition failed: UID in precondition: "
                    f"{opts.uid}, UID in object meta: {obj['metadata']['uid']}",
                )
            rv = obj["metadata"]["resourceVersion"]
            if opts.resource_version and opts.resource_version != rv:
                raise conflict(
                    rt.key,
                    name,
                    f"Precondition failed: ResourceVersion in "
                    f"precondition: {opts.resource_version}, ResourceVersion in "
                    f"object meta: {rv}",
                )
            if opts.dry_run:
                return WriteResult(self._served(rt, obj))
            gone, final = self._delete(rt.key, obj, opts)
            return WriteResult(self._served(rt, final), code=200 if gone else 202)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str,
        match: Matcher,
        opts: DeleteOptions = DeleteOptions(),
    ) -> list[Obj]:
        with self.cond:
            victims = [
                o
                for (ns, _), o in sorted(self._objects.get(rt.key, {}).items())
                if (not namespace or ns == namespace) and match(o)
            ]
            if opts.dry_run:
                return [self._served(rt, o) for o in victims]
            return [self._served(rt, self._delete(rt.key, o, opts)[1]) for o in victims]

    # --- watch ----------------------------------------------------------------------

    def snapshot(self, rt: ResourceType, namespace: str) -> tuple[list[Obj], int]:
        """Current objects and the resourceVersion a watch continues from."""
        items, meta = self.list_objects(rt, namespace, lambda o: True)
        return items, int(meta["resourceVersion"])

    def events_after(
        self, key: Key, after_rv: int, timeout_s: float, stop: Callable[[], bool]
    ) -> tuple[list[WatchEvent], int]:
        """Events for `key` with rv > after_rv, waiting up to timeout_s for the first one.

        Returns the events and the rv the caller has now seen up to; raises 410 Expired
        when history after `after_rv` is no longer retained.
        """
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                if after_rv < self._compacted_rv:
                    raise expired(f"too old resource version: {after_rv} ({self._compacted_rv})")
                start = bisect.bisect_right(self._history, after_rv, key=lambda e: e.rv)
                events = [e for e in self._history[start:] if e.key == key]
                remaining = deadline - time.monotonic()
                if events or remaining <= 0 or stop():
                    return events, max(after_rv, self._rv)
                self.cond.wait(remaining)

    def compact(self) -> int:
        """Forget all history: every resourceVersion handed out so far becomes too old."""
        with self.cond:
            self._rv += 1
            self._compacted_rv = self._rv
            self._history.clear()
            self.cond.notify_all()
            return self._rv

    def wake_watchers(self) -> None:
        with self.cond:
            self.cond.notify_all()

    # --- internals ------------------------------------------------------------------

    def _type(self, key: Key) -> ResourceType:
        return self.registry.versions_of(key)[0]

    def _served(self, rt: ResourceType, obj: Obj) -> Obj:
        """The stored object as seen through the version `rt` serves (a shallow copy)."""
        return {**obj, "apiVersion": rt.api_version}

    def _require(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt.key, name)
        return obj

    def _check_namespace(self, rt: ResourceType, namespace: str, meta: Obj) -> str:
        if not rt.namespaced:
            return ""
        in_body = meta.get("namespace")
        if in_body and namespace and in_body != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        ns = namespace or in_body or ""
        holder = self._objects.get(NAMESPACE_KEY, {}).get(("", ns))
        if holder is None:
            raise not_found(NAMESPACE_KEY, ns)
        if holder["metadata"].get("deletionTimestamp"):
            raise forbidden(
                f'{rt.plural} "{meta.get("name") or meta.get("generateName")}" is '
                f"forbidden: unable to create new content in namespace {ns} "
                "because it is being terminated"
            )
        return str(ns)

    def _update(
        self, rt: ResourceType, old: Obj, new: Obj, subresource: str, opts: WriteOptions
    ) -> WriteResult:
        meta, name = new["metadata"], old["metadata"]["name"]
        if meta.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the "
                f"name on the URL ({name})"
            )
        if (
            rt.namespaced
            and meta.get("namespace", old["metadata"]["namespace"]) != old["metadata"]["namespace"]
        ):
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.key, name)
        warnings = strategy.prepare_update(rt, new, old, subresource, opts.field_validation)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return WriteResult(self._served(rt, old), warnings)
        if opts.dry_run:
            return WriteResult(self._served(rt, new), warnings)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(rt.key, new)  # the last finalizer went: one DELETED event
            return WriteResult(self._served(rt, new), warnings)
        self._commit(rt.key, "MODIFIED", new, old)
        if rt.key == CRD_KEY:
            self.registry.set_crd(name, types_from_crd(new))
        if meta.get("ownerReferences") != old["metadata"].get("ownerReferences"):
            self._collect_if_orphaned(new)
        return WriteResult(self._served(rt, new), warnings)

    def _patched(self, rt: ResourceType, old: Obj, content_type: str, patch: Any) -> Obj:
        if content_type == "application/merge-patch+json":
            return dict(merge_patch(old, patch))
        if content_type == "application/json-patch+json":
            result = json_patch(old, patch)
            if not isinstance(result, dict):
                raise bad_request("json patch result is not an object")
            return result
        if content_type == "application/strategic-merge-patch+json":
            if rt.custom:
                raise unsupported_media_type(
                    ", ".join(t for t in PATCH_TYPES if "strategic" not in t)
                )
            return dict(strategic_merge_patch(old, patch))
        raise unsupported_media_type(", ".join(PATCH_TYPES))

    def _apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        old: Obj | None,
        patch: Any,
        subresource: str,
        opts: WriteOptions,
    ) -> WriteResult:
        """Server-side apply, approximated: create, else merge the applied configuration."""
        if not isinstance(patch, dict):
            raise bad_request("apply patch must be an object")
        if old is None:
            if subresource:
                raise not_found(rt.key, name)
            body = copy.deepcopy(patch)
            body.setdefault("metadata", {}).setdefault("name", name)
            return self.create(rt, namespace, body, opts)
        patch = copy.deepcopy(patch)
        patch.get("metadata", {}).pop("resourceVersion", None)
        new = dict(merge_patch(old, patch))
        strategy.check_kind(rt, new)
        return self._update(rt, old, new, subresource, opts)

    def _commit(self, key: Key, event_type: str, obj: Obj, old: Obj | None) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        meta = obj["metadata"]
        if event_type != "DELETED":
            self._objects.setdefault(key, {})[(meta.get("namespace", ""), meta["name"])] = obj
            self._by_uid[meta["uid"]] = (key, meta.get("namespace", ""), meta["name"])
            for ref in meta.get("ownerReferences") or []:
                self._dependents.setdefault(ref.get("uid", ""), set()).add(meta["uid"])
        self._history.append(WatchEvent(self._rv, event_type, key, obj, old))
        if len(self._history) > 2 * self.history_limit:
            dropped = self._history[: -self.history_limit]
            self._compacted_rv = dropped[-1].rv
            del self._history[: -self.history_limit]
        self.cond.notify_all()

    def _delete(self, key: Key, obj: Obj, opts: DeleteOptions) -> tuple[bool, Obj]:
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
            self._commit(key, "MODIFIED", marked, obj)
            return False, marked
        final = copy.deepcopy(obj)
        self._remove(key, final)
        return True, final

    def _grace_period(self, key: Key, obj: Obj, opts: DeleteOptions) -> int:
        if not (self.graceful_pods and key == ("", "pods") and obj["spec"].get("nodeName")):
            return 0
        if opts.grace_period_s is not None:
            return opts.grace_period_s
        return int(obj["spec"].get("terminationGracePeriodSeconds", 30))

    def _remove(self, key: Key, obj: Obj) -> None:
        """Really remove: DELETED event, indexes, then whatever hung on this object."""
        meta = obj["metadata"]
        ns, name, uid = meta.get("namespace", ""), meta["name"], meta["uid"]
        old = self._objects[key].pop((ns, name))
        self._by_uid.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            self._dependents.get(ref.get("uid", ""), set()).discard(uid)
        self._commit(key, "DELETED", obj, old)
        if key == CRD_KEY:
            self._drop_custom_resources(obj)
        self._collect(uid)
        if ns:
            self._finish_namespace(ns)

    def _drop_custom_resources(self, crd: Obj) -> None:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for obj in list(self._objects.get((group, plural), {}).values()):
            self._remove((group, plural), copy.deepcopy(obj))
        self.registry.remove_crd(crd["metadata"]["name"])

    def _delete_namespace(self, ns_obj: Obj) -> tuple[bool, Obj]:
        name = ns_obj["metadata"]["name"]
        marked = ns_obj
        if not ns_obj["metadata"].get("deletionTimestamp"):
            marked = copy.deepcopy(ns_obj)
            marked["metadata"]["deletionTimestamp"] = now_rfc3339()
            marked["status"] = {"phase": "Terminating"}
            self._commit(NAMESPACE_KEY, "MODIFIED", marked, ns_obj)
        for key, objects in list(self._objects.items()):
            for (ns, _), obj in sorted(objects.items()):
                if ns == name:
                    self._delete(key, obj, DeleteOptions())
        self._finish_namespace(name)
        current = self._objects[NAMESPACE_KEY].get(("", name))
        return current is None, current or marked

    def _finish_namespace(self, name: str) -> None:
        ns_obj = self._objects.get(NAMESPACE_KEY, {}).get(("", name))
        if ns_obj is None or not ns_obj["metadata"].get("deletionTimestamp"):
            return
        if ns_obj["metadata"].get("finalizers"):
            return
        if any(ns == name for objects in self._objects.values() for ns, _ in objects):
            return
        self._remove(NAMESPACE_KEY, copy.deepcopy(ns_obj))

    def _owners_alive(self, obj: Obj) -> list[Obj]:
        return [
            r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") in self._by_uid
        ]

    def _collect(self, owner_uid: str, force: bool = False) -> None:
        """Garbage-collect the dependents of an owner that is gone (or going, if force)."""
        for dep_uid in sorted(self._dependents.pop(owner_uid, set())):
            located = self._by_uid.get(dep_uid)
            if located is None:
                continue
            key, ns, name = located
            dep = self._objects[key][(ns, name)]
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in self._owners_alive(dep) if not (force and r["uid"] == owner_uid)]
            if alive:
                self._set_owner_refs(key, dep, alive)
            elif any(r.get("uid") == owner_uid for r in refs):
                self._delete(key, dep, DeleteOptions())

    def _collect_if_orphaned(self, obj: Obj) -> None:
        """A dependent whose owners do not exist is collected, as the real GC does."""
        refs = obj["metadata"].get("ownerReferences")
        if refs and not self._owners_alive(obj):
            located = self._by_uid[obj["metadata"]["uid"]]
            current = self._objects[located[0]][located[1:]]
            self._delete(located[0], current, DeleteOptions())

    def _orphan(self, owner_uid: str) -> None:
        for dep_uid in sorted(self._dependents.pop(owner_uid, set())):
            located = self._by_uid.get(dep_uid)
            if located is not None:
                dep = self._objects[located[0]][located[1:]]
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
            self._commit(key, "MODIFIED", new, obj)


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from e
