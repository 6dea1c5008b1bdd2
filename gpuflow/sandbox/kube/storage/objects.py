"""The stored objects, their indexes, and the one commit every write goes through.

Objects are kept by resource type and (namespace, name), indexed by uid and by owner
uid (for the garbage collector, deletion.py). `commit` stamps a write with the next
resourceVersion (history.py), stores or indexes it, records its watch event and wakes
the watchers. Stored objects are never mutated in place, so readers may hold them.
Used by store.Store and deletion.Deleter under the store's one lock; not locked itself.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from gpuflow.sandbox.kube.storage.history import History, Key, WatchEvent

Obj = dict[str, Any]
Name = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Objects:
    """Every stored object, by type, by uid, and by the uids of its owners."""

    def __init__(self, history: History, cond: threading.Condition) -> None:
        self.history = history
        self._cond = cond  # notified on each commit: watches wait on it
        self._by_type: dict[Key, dict[Name, Obj]] = {}
        self._by_uid: dict[str, tuple[Key, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}

    def of(self, key: Key) -> dict[Name, Obj]:
        """The objects of one resource type (read only)."""
        return self._by_type.get(key, {})

    def types(self) -> list[tuple[Key, dict[Name, Obj]]]:
        return list(self._by_type.items())

    def exists(self, uid: str) -> bool:
        return uid in self._by_uid

    def locate(self, uid: str) -> tuple[Key, str, str] | None:
        """(type, namespace, name) of the object with this uid, if stored."""
        return self._by_uid.get(uid)

    def take_dependents(self, owner_uid: str) -> list[str]:
        """The uids of the objects that named `owner_uid` as owner, sorted; forgotten."""
        return sorted(self._dependents.pop(owner_uid, set()))

    def commit(self, key: Key, event_type: str, obj: Obj, old: Obj | None) -> None:
        rv = self.history.next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        meta = obj["metadata"]
        if event_type != "DELETED":
            self._by_type.setdefault(key, {})[(meta.get("namespace", ""), meta["name"])] = obj
            self._by_uid[meta["uid"]] = (key, meta.get("namespace", ""), meta["name"])
            for ref in meta.get("ownerReferences") or []:
                self._dependents.setdefault(ref.get("uid", ""), set()).add(meta["uid"])
        self.history.record(WatchEvent(rv, event_type, key, obj, old))
        self._cond.notify_all()

    def drop(self, key: Key, obj: Obj) -> Obj:
        """Unindex an object about to be committed as DELETED; the stored version."""
        meta = obj["metadata"]
        ns, name, uid = meta.get("namespace", ""), meta["name"], meta["uid"]
        old = self._by_type[key].pop((ns, name))
        self._by_uid.pop(uid, None)
        for ref in meta.get("ownerReferences") or []:
            self._dependents.get(ref.get("uid", ""), set()).discard(uid)
        return old
