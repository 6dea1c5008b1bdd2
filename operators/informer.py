"""Informers: a local cache of one kind, kept current by list-then-watch.

The operator runs one per kind (DLJobs, Pods, Nodes), each in a thread of its own;
the backend reads their caches to build snapshots. A watch that ends (its timeout,
a dropped connection) resumes from the last resourceVersion seen; a 410 Gone means
the server compacted past it, and the informer lists afresh. Writers put the objects
the API returned into the cache at once (`upsert`), so that the next round sees its
own writes before their watch events arrive; an older event never overwrites them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from operators.kube import GONE, KubeApi, Obj, Resource, status_code

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
RETRY_S = 0.5  # pause before watching again after an error (not a 410)


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def newer(a: Obj, b: Obj) -> bool:
    """Whether `a` is a later version of the object than `b` (resourceVersions compared
    as numbers when both are, which every etcd-backed server gives; else a wins)."""
    ra = a["metadata"].get("resourceVersion", "")
    rb = b["metadata"].get("resourceVersion", "")
    if ra.isdigit() and rb.isdigit():
        return int(ra) >= int(rb)
    return True


class Informer:
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        on_change: Callable[[], None] = lambda: None,
        *,
        watch_timeout_s: int = 60,
    ) -> None:
        self.api = api
        self.resource = resource
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.synced = threading.Event()
        self.relists = 0
        self._lock = threading.Lock()
        self._store: dict[Key, Obj] = {}
        self._rv = ""

    # -- the cache -------------------------------------------------------------------

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: Key) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def upsert(self, obj: Obj) -> None:
        """Write-through of an object the API returned."""
        k = key_of(obj)
        with self._lock:
            old = self._store.get(k)
            if old is None or newer(obj, old):
                self._store[k] = obj

    def mark_deleting(self, key: Key, timestamp: str) -> None:
        """A delete was sent: keep the object (it may linger while it terminates) but
        show it as terminating until the watch says what became of it."""
        with self._lock:
            old = self._store.get(key)
            if old is not None and not old["metadata"].get("deletionTimestamp"):
                meta = {**old["metadata"], "deletionTimestamp": timestamp}
                self._store[key] = {**old, "metadata": meta}

    # -- list and watch -----------------------------------------------------------------

    def relist(self) -> None:
        items, rv = self.api.list_objects(self.resource)
        fresh = {key_of(o): o for o in items}
        with self._lock:
            for k, old in self._store.items():
                mine = fresh.get(k)
                if mine is not None and newer(old, mine) and old is not mine:
                    fresh[k] = old  # a write of ours newer than the list
            self._store = fresh
            self._rv = rv
        self.relists += 1
        self.synced.set()
        self.on_change()

    def run(self, stop: threading.Event) -> None:
        """List, then watch until `stop` is set; relist on 410 Gone."""
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self._watch_once(stop)
            except Exception as exc:  # the loop must outlive any API or network error
                code = status_code(exc)
                need_list = code == GONE or need_list
                if code != GONE:
                    log.warning("%s watch: %s", self.resource.name, exc)
                    stop.wait(RETRY_S)

    def _watch_once(self, stop: threading.Event) -> None:
        for event in self.api.watch(self.resource, self._rv, self.watch_timeout_s):
            if stop.is_set():
                return
            self._handle(event)

    def _handle(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        rv = obj.get("metadata", {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        k = key_of(obj)
        with self._lock:
            if kind == "DELETED":
                self._store.pop(k, None)
            else:
                old = self._store.get(k)
                if old is None or newer(obj, old):
                    self._store[k] = obj
            if rv:
                self._rv = rv
        self.on_change()
