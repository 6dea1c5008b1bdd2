"""The simulator's waiting jobs kept in each policy's order between rounds.

`WaitingQueues` is the `WaitingIndex` (controller.model.waiting) that a round's
snapshot carries: for each `WaitingKey` a policy has asked for, the waiting jobs in
sorted lists, one per gang size, built from the whole queue on the first request and
then kept by `update`/`remove` for the jobs whose view changed. Owned by
controller.sim.table's `JobTable`, which calls those two from `refresh`; read by the
policies through `Snapshot.waiting_in_order` and `waiting_by_size`. A round thus
costs the jobs that changed and the head of the queue the policy reads, not the
whole queue. The same calls log which jobs changed (`changes_since`), for a policy
that keeps its own ranking of the waiting jobs between rounds (Tiresias).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sortedcontainers import SortedList

from controller.model import JobView
from controller.model.waiting import WaitingKey

# An index entry: (the key's value, the job's view). Keys end with the job id, so
# entries never compare their views.
_Entry = tuple[tuple[Any, ...], JobView]

# The change log keeps at least this many of the latest changes, and at most twice
# that plus twice the queue: a policy reads it every round, so it asks only for the
# changes of one round; an older mark is answered "cannot tell" and reads everything.
_LOG_KEPT = 4096


class _Ordered:
    """The waiting jobs in one key's order, one sorted list per gang size."""

    __slots__ = ("entries", "key", "sizes")

    def __init__(self, key: WaitingKey, views: Iterator[JobView]) -> None:
        self.key = key
        self.entries: dict[str, _Entry] = {}
        by_size: dict[int, list[_Entry]] = {}
        for view in views:
            entry = (key(view), view)
            self.entries[view.job_id] = entry
            by_size.setdefault(view.spec.num_gpus, []).append(entry)
        self.sizes = {n: SortedList(entries) for n, entries in by_size.items()}

    def add(self, view: JobView) -> None:
        entry = (self.key(view), view)
        self.entries[view.job_id] = entry
        size = self.sizes.get(view.spec.num_gpus)
        if size is None:
            size = self.sizes[view.spec.num_gpus] = SortedList()
        size.add(entry)

    def remove(self, job_id: str) -> None:
        entry = self.entries.pop(job_id, None)
        if entry is not None:
            n = entry[1].spec.num_gpus
            size = self.sizes[n]
            size.remove(entry)
            if not size:
                del self.sizes[n]


class WaitingQueues:
    """Every ordered index asked for, and the GPUs the waiting jobs ask for."""

    __slots__ = ("_gpus_asked", "_log", "_log_start", "_ordered", "_sizes", "_waiting")

    def __init__(self, waiting: Mapping[str, JobView]) -> None:
        self._waiting = waiting  # the table's waiting views, by id
        self._ordered: dict[WaitingKey, _Ordered] = {}
        self._gpus_asked = 0
        self._sizes: dict[int, int] = {}  # gang size -> how many waiting jobs ask for it
        self._log: list[str] = []  # ids of the jobs whose waiting view came or went
        self._log_start = 0  # the mark of _log[0]: how many changes were dropped

    def update(self, view: JobView, was_waiting: JobView | None) -> None:
        """A waiting job's view is new (`was_waiting`: its previous waiting view)."""
        if was_waiting is not None:
            self.remove(was_waiting)
        self._logged(view.job_id)
        n = view.spec.num_gpus
        self._gpus_asked += n
        self._sizes[n] = self._sizes.get(n, 0) + 1
        for ordered in self._ordered.values():
            ordered.add(view)

    def remove(self, was_waiting: JobView) -> None:
        """A job no longer waits (it runs or left); `was_waiting`: its waiting view."""
        self._logged(was_waiting.job_id)
        n = was_waiting.spec.num_gpus
        self._gpus_asked -= n
        left = self._sizes[n] - 1
        if left:
            self._sizes[n] = left
        else:
            del self._sizes[n]
        for ordered in self._ordered.values():
            ordered.remove(was_waiting.job_id)

    def smallest_gang(self) -> int:
        """The fewest GPUs a waiting job asks for (0: none waits)."""
        return min(self._sizes, default=0)

    def _logged(self, job_id: str) -> None:
        log = self._log
        log.append(job_id)
        if len(log) > 2 * (_LOG_KEPT + len(self._waiting)):
            dropped = len(log) - _LOG_KEPT
            del log[:dropped]
            self._log_start += dropped

    def _index(self, key: WaitingKey) -> _Ordered:
        ordered = self._ordered.get(key)
        if ordered is None:
            ordered = self._ordered[key] = _Ordered(key, iter(self._waiting.values()))
        return ordered

    # -- the WaitingIndex protocol ------------------------------------------------

    def in_order(self, key: WaitingKey) -> Iterator[JobView]:
        sizes = list(self._index(key).sizes.values())
        if len(sizes) == 1:
            return (entry[1] for entry in sizes[0])
        return (entry[1] for entry in heapq.merge(*sizes))

    def by_size(self, key: WaitingKey) -> Mapping[int, Iterator[JobView]]:
        sizes = self._index(key).sizes
        return {n: (entry[1] for entry in entries) for n, entries in sizes.items()}

    def gpus_asked(self) -> int:
        return self._gpus_asked

    def changes_since(self, mark: int | None) -> tuple[int, Sequence[str] | None]:
        now = self._log_start + len(self._log)
        if mark is None or mark < self._log_start or mark > now:
            return now, None
        return now, self._log[mark - self._log_start :]
