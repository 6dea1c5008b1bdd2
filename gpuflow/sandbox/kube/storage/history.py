"""The resourceVersion counter and the bounded watch history behind it.

Every write the store commits (`objects.Objects.commit`) takes the next value of one
global counter, as etcd's revision does, and appends a `WatchEvent`; watches read the
events after a resourceVersion through `store.Store.events_after`. The history keeps
at least `limit` events: when it holds twice that, the oldest go, and a
resourceVersion before those kept is too old (410 Expired), as is every one handed
out before a `compact`. Not locked itself: the store's one lock guards it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from gpuflow.sandbox.kube.errors import expired

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural)


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    obj: Obj
    old: Obj | None


class History:
    """The last resourceVersion handed out and the watch events retained."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self.rv = 0
        self.compacted_rv = 0  # resourceVersions before this one are too old
        self._events: list[WatchEvent] = []

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def record(self, event: WatchEvent) -> None:
        self._events.append(event)
        if len(self._events) > 2 * self.limit:
            dropped = self._events[: -self.limit]
            self.compacted_rv = dropped[-1].rv
            del self._events[: -self.limit]

    def after(self, key: Key, after_rv: int) -> list[WatchEvent]:
        """Events for `key` with rv > after_rv; 410 Expired when they are no longer kept."""
        if after_rv < self.compacted_rv:
            raise expired(f"too old resource version: {after_rv} ({self.compacted_rv})")
        start = bisect.bisect_right(self._events, after_rv, key=lambda e: e.rv)
        return [e for e in self._events[start:] if e.key == key]

    def compact(self) -> int:
        """Forget all events: every resourceVersion handed out so far becomes too old."""
        self.rv += 1
        self.compacted_rv = self.rv
        self._events.clear()
        return self.rv
