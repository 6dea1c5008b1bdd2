"""Informers: a local cache of one kind, kept current by list-then-watch.

The operator runs one per kind (DLJobs, Pods, Nodes), each in a thread of its own;
the backend reads their caches to build snapshots. A watch that ends (its timeout,
a dropped connection) resumes from the last resourceVersion seen; a 410 Gone means
the server compacted past it, and the informer lists afresh. Writers put the objects
the API returned into the cache at once (`upsert`), so that the next round sees its
own writes before their watch events arrive; an older event never overwrites them.

A list or watch that fails is retried with exponential back-off (`Backoff`), reset
by the next success. A 404 on the list means the kind is not served (the DLJob CRD
not installed): the informer logs `missing_hint` once, in one line, and keeps
retrying, so that the operator starts as soon as the CRD appears. API errors are
logged by KubeApi; the informer logs only what it does about them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from operators.kube import API_ERRORS, GONE, NOT_FOUND, KubeApi, Obj, Resource, status_code
from operators.logs import emit, one_line

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
# A missing kind is named again at most this often while the informer retries.
MISSING_REMIND_S = 300.0


@dataclass
class Backoff:
    """Exponential back-off between failed lists or watches: client-go's reflector
    waits 800 ms doubling to 30 s (its jitter is left out: one operator replica
    retrying cannot synchronise with others)."""

    initial_s: float = 0.8
    max_s: float = 30.0
    factor: float = 2.0
    _next_s: float = 0.0

    def next_s(self) -> float:
        self._next_s = min(self.max_s, self._next_s * self.factor or self.initial_s)
        return self._next_s

    def reset(self) -> None:
        self._next_s = 0.0


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
        missing_hint: str = "",
        backoff: Backoff | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.missing_hint = missing_hint  # what to do when the list answers 404
        self.backoff = backoff or Backoff()
        self.synced = threading.Event()
        self.relists = 0
        self._missing_since: float | None = None  # monotonic, when last named as missing
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
        """List, then watch until `stop` is set; relist on 410 Gone; back off after
        other errors."""
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                    self._found()
                self._watch_once(stop)
                self.backoff.reset()
            except Exception as exc:  # the loop must outlive any API or network error
                code = status_code(exc)
                if code == GONE:
                    need_list = True
                    emit(log, logging.DEBUG, "relist", resource=self.resource.name, code=code)
                    continue
                delay_s = self.backoff.next_s()
                if need_list and code == NOT_FOUND and self.missing_hint:
                    self._missing(delay_s)
                elif not isinstance(exc, API_ERRORS):  # KubeApi logged those
                    what = "list" if need_list else "watch"
                    fields = {"resource": self.resource.name, "retry_s": delay_s}
                    emit(log, logging.WARNING, f"{what} failed", **fields, error=one_line(exc))
                stop.wait(delay_s)

    def _missing(self, delay_s: float) -> None:
        """Name a missing kind in one line, again only every MISSING_REMIND_S."""
        now = time.monotonic()
        first = self._missing_since is None
        if first or now - (self._missing_since or now) >= MISSING_REMIND_S:
            self._missing_since = now
            level = logging.WARNING
        else:
            level = logging.DEBUG
        res = self.resource.name
        emit(log, level, "not served", resource=res, hint=self.missing_hint, retry_s=delay_s)

    def _found(self) -> None:
        if self._missing_since is not None:
            self._missing_since = None
            emit(log, logging.INFO, "served again", resource=self.resource.name)
        self.backoff.reset()

    def _watch_once(self, stop: threading.Event) -> None:
        emit(log, logging.DEBUG, "watch", resource=self.resource.name, resource_version=self._rv)
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


@dataclass
class Caches:
    """The operator's three informers (operators/operator.py builds them; the backend
    reads them and the writer updates them after its own writes)."""

    dljobs: Informer
    pods: Informer
    nodes: Informer

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in (self.dljobs, self.pods, self.nodes))
