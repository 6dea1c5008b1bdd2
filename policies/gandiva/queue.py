"""Gandiva's waiting jobs in round-robin order, read from the head, a gang size at a time.

Called by `policies.gandiva` each round: placing, packing and time-slicing each walk
the jobs still waiting from the head of the queue (`RoundRobin.walk`). A mechanism
closes a gang size once no later job of that size can change anything this round (no
free room for it, no host, no expired slice), and the walk ends when every size it
has met is closed. On a backend that keeps the queue ordered (the simulator:
`Snapshot.waiting_by_size`) a round thus reads the heads of the queue, not all of it;
the jobs it never reads share the plan's default reason.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from controller.model import WAITING, JobView, Snapshot


def gandiva_key(job: JobView) -> tuple[float, str]:
    """Round-robin: the job that has waited longest (since it arrived or was suspended)
    first (the `WaitingKey` the backend keeps the queue in)."""
    return (job.waiting_since_s, job.job_id)


class RoundRobin:
    """The round's waiting jobs, longest waiting first; a job the round starts (it is
    in `run` and was not running) drops out of the walks that follow."""

    __slots__ = ("_current", "_run", "_snapshot", "_sorted", "_touched")

    def __init__(self, snapshot: Snapshot, run: Mapping[str, Any], touched: Iterable[str]) -> None:
        self._snapshot = snapshot
        self._run = run
        self._touched = touched  # every job the round started or moved so far
        assert snapshot.current is not None
        self._current = snapshot.current
        # A backend that keeps no order: sort once per round, not once per walk.
        self._sorted: dict[int, list[JobView]] | None = None
        if snapshot.ordered is None:
            by_size = snapshot.waiting_by_size(gandiva_key)
            self._sorted = {n: list(jobs) for n, jobs in by_size.items()}

    def _by_size(self) -> Mapping[int, Iterable[JobView]]:
        if self._sorted is not None:
            return self._sorted
        return self._snapshot.waiting_by_size(gandiva_key)

    def walk(self) -> Walk:
        """A pass over the jobs still waiting, from the head."""
        return Walk(self._by_size(), self._run)

    def started(self) -> list[JobView]:
        """The waiting jobs the round has started so far."""
        current, run, job = self._current, self._run, self._snapshot.job
        out: list[JobView] = []
        for job_id in self._touched:
            if job_id in run and job_id not in current:
                view = job(job_id)
                assert view is not None
                out.append(view)
        return out

    def count(self) -> int:
        """How many jobs still wait."""
        return self._snapshot.waiting_count() - len(self.started())

    def gpus_asked(self) -> int:
        """The GPUs the jobs still waiting ask for together."""
        started = sum(job.spec.num_gpus for job in self.started())
        return self._snapshot.waiting_gpus_asked() - started

    def heads(self) -> dict[int, JobView]:
        """The first job still waiting of each gang size."""
        out: dict[int, JobView] = {}
        run = self._run
        for n, jobs in self._by_size().items():
            for job in jobs:
                if job.job_id not in run:
                    out[n] = job
                    break
        return out


# A size's next job in the walk: (its key, its size, the job, the rest of the size).
_Head = tuple[tuple[float, str], int, JobView, Iterator[JobView]]


class Walk:
    """One pass over the waiting jobs not yet started, in round-robin order (a merge of
    the sizes' queues). `close(n)` ends the pass for gang size n."""

    __slots__ = ("_heap", "_pending", "_run")

    def __init__(self, by_size: Mapping[int, Iterable[JobView]], run: Mapping[str, Any]) -> None:
        self._run = run
        self._heap: list[_Head] = []
        self._pending: tuple[int, Iterator[JobView]] | None = None
        for n, jobs in by_size.items():
            self._advance(n, iter(jobs))

    def _advance(self, n: int, jobs: Iterator[JobView]) -> None:
        run = self._run
        for job in jobs:
            if job.job_id not in run:
                heapq.heappush(self._heap, ((job.waiting_since_s, job.job_id), n, job, jobs))
                return

    def __iter__(self) -> Walk:
        return self

    def __next__(self) -> JobView:
        # The size of the job returned last is read on only now, unless it was closed.
        if self._pending is not None:
            self._advance(*self._pending)
            self._pending = None
        while self._heap:
            _, n, job, jobs = heapq.heappop(self._heap)
            if job.job_id in self._run:  # started since it came to the head
                self._advance(n, jobs)
                continue
            self._pending = (n, jobs)
            return job
        raise StopIteration

    def close(self, n: int) -> None:
        """No more jobs of gang size n in this pass."""
        if self._pending is not None and self._pending[0] == n:
            self._pending = None
        if any(head[1] == n for head in self._heap):
            self._heap = [head for head in self._heap if head[1] != n]
            heapq.heapify(self._heap)


_WAITING = tuple(WAITING)

# What decides whether a waiting job can be packed, beside its gang size: its model,
# its GPU memory, whether it is elastic, and its own utilisation (JobSpec.gpu_util;
# None: the model's catalogue figure).
Kind = tuple[str, int | None, bool, float | None]


class WaitingKinds:
    """How many waiting jobs of each gang size are of each `Kind`, as of the backend's
    change mark `mark`: kept between rounds (in `GandivaState`) and brought up to date
    from the jobs the backend logs as changed (`Snapshot.waiting_changes`), so that
    packing can tell when no job behind can pack without reading them. A kind never
    changes while a job is active, so the counts hold for any state that reads them
    at the same mark of the same backend (`source`)."""

    __slots__ = ("by_size", "kind_of", "mark", "own_utils", "source")

    def __init__(self, source: object, mark: int) -> None:
        self.source = source
        self.mark = mark
        self.kind_of: dict[str, tuple[int, Kind]] = {}
        self.by_size: dict[int, dict[Kind, int]] = {}
        # How many of the jobs counted carry their own utilisation.
        self.own_utils = 0

    def add(self, job: JobView) -> None:
        if job.job_id in self.kind_of:
            return
        spec = job.spec
        n, kind = spec.num_gpus, (spec.model, spec.gpu_mem_mib, spec.elastic, spec.gpu_util)
        self.kind_of[job.job_id] = (n, kind)
        counts = self.by_size.setdefault(n, {})
        counts[kind] = counts.get(kind, 0) + 1
        self.own_utils += spec.gpu_util is not None

    def discard(self, job_id: str) -> None:
        entry = self.kind_of.pop(job_id, None)
        if entry is None:
            return
        n, kind = entry
        counts = self.by_size[n]
        counts[kind] -= 1
        if not counts[kind]:
            del counts[kind]
        self.own_utils -= kind[3] is not None


def waiting_kinds(snapshot: Snapshot, kept: WaitingKinds | None) -> WaitingKinds | None:
    """The kinds of the snapshot's waiting jobs: `kept` brought up to date, or counted
    afresh when the backend cannot tell what changed since; None on a backend that
    keeps no change log (packing then reads the whole queue)."""
    if kept is not None and kept.source is not snapshot.ordered:
        kept = None  # kept on another backend: its marks mean nothing here
    mark, changed = snapshot.waiting_changes(kept.mark if kept is not None else None)
    if mark is None:
        return None
    if kept is None or changed is None:
        kept = WaitingKinds(snapshot.ordered, mark)
        for job in snapshot.waiting():
            kept.add(job)
        return kept
    kind_of = kept.kind_of
    # The index's own lookup and membership by identity (an Enum hashes in Python):
    # two changes a swap, read every round.
    view_of = snapshot.index.get if snapshot.index is not None else snapshot.job
    waiting = _WAITING
    for job_id in changed:
        view = view_of(job_id)
        if view is not None and view.status in waiting:
            if job_id not in kind_of:
                kept.add(view)
        elif job_id in kind_of:
            kept.discard(job_id)
    kept.mark = mark
    return kept
