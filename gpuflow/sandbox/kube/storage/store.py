"""The object store behind the test server: reads, writes, and watches' events.

`apiserver.py` calls it once per request (and watch.py for each watch's events). One
lock (`cond`) guards everything. Writes go through the per-kind rules (strategy.py),
optimistic concurrency on resourceVersion, dry runs, patches (patch.py; server-side
apply approximated here) and pagination's continue tokens; each is committed by
objects.py, which stamps it with the next value of one global resourceVersion counter
and appends its `WatchEvent` to the bounded history (history.py) that watches read
from. Deletion — finalizers, graceful pods, namespaces, garbage collection — is
deletion.py's.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
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
)
from gpuflow.sandbox.kube.resources import (
    CRD_KEY,
    NAMESPACE_KEY,
    Registry,
    ResourceType,
    types_from_crd,
)
from gpuflow.sandbox.kube.selectors import Matcher
from gpuflow.sandbox.kube.storage.deletion import DeleteOptions, Deleter
from gpuflow.sandbox.kube.storage.history import History, Key, WatchEvent
from gpuflow.sandbox.kube.storage.objects import Objects, now_rfc3339
from gpuflow.sandbox.kube.storage.patch import merge_patch, patched

Obj = dict[str, Any]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DELETE_DEFAULTS = DeleteOptions()  # frozen, so one instance serves every call
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's names.SimpleNameGenerator


@dataclass
class WriteResult:
    obj: Obj
    warnings: list[str] = field(default_factory=list)
    code: int = 200


@dataclass(frozen=True)
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Warn"  # the server's default since 1.27


class Store:
    """Every object of every resource type, behind one lock (see the module doc)."""

    def __init__(
        self, registry: Registry, history_limit: int = 10_000, graceful_pods: bool = False
    ) -> None:
        self.registry = registry
        self.history_limit = history_limit
        # Pods bound to a node wait for a kubelet's final delete (gracePeriodSeconds=0).
        self.graceful_pods = graceful_pods
        self.cond = threading.Condition()
        self._history = History(history_limit)
        self._objects = Objects(self._history, self.cond)
        self._deleter = Deleter(self._objects, registry, graceful_pods)
        for ns in DEFAULT_NAMESPACES:
            self.create(self._type(NAMESPACE_KEY), "", {"metadata": {"name": ns}})

    # --- reads ----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.cond:
            return self._history.rv

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
            list_rv, start = self._history.rv, ("", "")
            if continue_token:
                list_rv, start = _decode_continue(continue_token)
                if list_rv < self._history.compacted_rv:
                    raise expired(
                        "The provided continue parameter is too old to display a "
                        "consistent list result. You can start a new list without "
                        "the continue parameter."
                    )
            items = [
                self._served(rt, o)
                for k, o in sorted(self._objects.of(rt.key).items())
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
            if (ns, meta["name"]) in self._objects.of(rt.key):
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
            self._objects.commit(rt.key, "ADDED", obj, None)
            if rt.key == CRD_KEY:
                self.registry.set_crd(meta["name"], types_from_crd(obj))
            self._deleter.collect_if_orphaned(obj)
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
            old = self._objects.of(rt.key).get(key)
            if content_type == "application/apply-patch+yaml":
                return self._apply(rt, namespace, name, old, patch, subresource, opts)
            if old is None:
                raise not_found(rt.key, name)
            new = patched(old, content_type, patch, custom=rt.custom)
            strategy.check_kind(rt, new)
            return self._update(rt, old, new, subresource, opts)

    def delete(
        self, rt: ResourceType, namespace: str, name: str, opts: DeleteOptions = DELETE_DEFAULTS
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
            gone, final = self._deleter.delete(rt.key, obj, opts)
            return WriteResult(self._served(rt, final), code=200 if gone else 202)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str,
        match: Matcher,
        opts: DeleteOptions = DELETE_DEFAULTS,
    ) -> list[Obj]:
        with self.cond:
            victims = [
                o
                for (ns, _), o in sorted(self._objects.of(rt.key).items())
                if (not namespace or ns == namespace) and match(o)
            ]
            if opts.dry_run:
                return [self._served(rt, o) for o in victims]
            return [self._served(rt, self._deleter.delete(rt.key, o, opts)[1]) for o in victims]

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
                events = self._history.after(key, after_rv)
                remaining = deadline - time.monotonic()
                if events or remaining <= 0 or stop():
                    return events, max(after_rv, self._history.rv)
                self.cond.wait(remaining)

    def compact(self) -> int:
        """Forget all history: every resourceVersion handed out so far becomes too old."""
        with self.cond:
            rv = self._history.compact()
            self.cond.notify_all()
            return rv

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
        obj = self._objects.of(rt.key).get((namespace if rt.namespaced else "", name))
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
        holder = self._objects.of(NAMESPACE_KEY).get(("", ns))
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
            self._deleter.remove(rt.key, new)  # the last finalizer went: one DELETED event
            return WriteResult(self._served(rt, new), warnings)
        self._objects.commit(rt.key, "MODIFIED", new, old)
        if rt.key == CRD_KEY:
            self.registry.set_crd(name, types_from_crd(new))
        if meta.get("ownerReferences") != old["metadata"].get("ownerReferences"):
            self._deleter.collect_if_orphaned(new)
        return WriteResult(self._served(rt, new), warnings)

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


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(start)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from e
