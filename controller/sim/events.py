"""Events and the clock: what happens next in a simulation, and when.

Used by controller.sim.simulator's loop (`Simulator.advance`), which takes the
earliest of three sources at each step: the next arrival (`Arrivals`, the trace's
jobs by submit time and any submitted since), the next timed event (`EventQueue`:
completions, node events, wake-ups, re-rates) and the next round (`Clock`). A round
runs at the first multiple of `round_interval_s` at or after anything changed
(`Clock.request_round`); with an interval of 0 it runs at once. With rounds
anchored to events (`SimConfig.round_anchor="event"`) it runs at the change itself,
or one interval after the last round if that comes after it: ElasticFlow's simulator's
slots (scheduler.py, an event within a slot of the last one moves to its end).

A completion or re-rate event carries its job's `version`; a later change of the
job (a new speed, a stop) bumps the version, and the stale event is dropped before
it can move the clock.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from controller.model import JobSpec
from controller.sim.job import SimJob

# Event kinds, in the order events at one instant are handled.
FINISH, NODE, WAKE, RERATE = 0, 1, 2, 3

# The least heap size at which outdated events are swept out (`EventQueue.next_s`):
# a floor, not tuned, so that a small replay's heap is never swept.
SWEEP_AT_LEAST = 4096


class EventQueue:
    """Timed events as a heap of (time_s, kind, sequence, data); the sequence keeps
    events of one kind at one instant in the order they were pushed."""

    __slots__ = ("_heap", "_seq", "_sweep_at")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._sweep_at = SWEEP_AT_LEAST

    def push(self, t_s: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t_s, kind, self._seq, data))

    def next_s(self, active: Mapping[str, SimJob]) -> float:
        """When the next event is due (inf: none). Finish and re-rate events that a
        later change of their job outdated are dropped first."""
        heap = self._heap
        if len(heap) >= self._sweep_at:
            heap = self._sweep(active)
        while heap and heap[0][1] in (FINISH, RERATE):
            job_id, version = heap[0][3]
            job = active.get(job_id)
            if job is not None and job.version == version:
                break
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def _sweep(self, active: Mapping[str, SimJob]) -> list[tuple[float, int, int, Any]]:
        """Drop every outdated finish and re-rate event, not only those at the top.

        Each start, stop and re-rate leaves its job's previous finish event in the
        heap until its time comes (under Gandiva's time-slicing, up to 10,869 in the
        heap in the first 3,000 stand-in jobs on 32x8), and every push and pop pays
        for the heap's depth. The events left
        keep their (time, kind, sequence) keys, so they come out in the same order.
        Swept again once the heap has doubled: amortised, a constant per push."""
        live = []
        for event in self._heap:
            if event[1] in (FINISH, RERATE):
                job_id, version = event[3]
                job = active.get(job_id)
                if job is None or job.version != version:
                    continue
            live.append(event)
        heapq.heapify(live)
        self._heap = live
        self._sweep_at = max(SWEEP_AT_LEAST, 2 * len(live))
        return live

    def pop_due(self, t_s: float) -> Iterator[tuple[int, Any]]:
        """(kind, data) of every event due at or before `t_s`, including those pushed
        while the caller handles the ones before."""
        heap = self._heap
        while heap and heap[0][0] <= t_s:
            _, kind, _, data = heapq.heappop(heap)
            yield kind, data


def arrival_key(spec: JobSpec) -> tuple[float, str]:
    return (spec.submit_s, spec.job_id)


class Arrivals:
    """The jobs still to arrive, by (submit_s, job_id), and every job id ever used.

    An arrived job's spec is let go of here (its record holds it while it is active),
    so that a long replay does not keep every spec to its end."""

    __slots__ = ("_ids", "_next", "_pending")

    def __init__(self, specs: Iterable[JobSpec]) -> None:
        # Indices before _next are arrived jobs, None; only those after are read.
        pending = sorted(specs, key=arrival_key)
        self._ids = {s.job_id for s in pending}
        if len(self._ids) != len(pending):
            raise ValueError("job ids must be unique")
        self._pending: list[JobSpec | None] = list(pending)
        self._next = 0

    @property
    def count(self) -> int:
        """Every job of the trace and submitted since (a withdrawn one no more)."""
        return len(self._pending)

    def used(self, job_id: str) -> bool:
        return job_id in self._ids

    def claim(self, job_id: str) -> None:
        """Record `job_id` as used (a job added by other means than `add`)."""
        self._ids.add(job_id)

    def next_s(self) -> float:
        if self._next == len(self._pending):
            return math.inf
        spec = self._pending[self._next]
        assert spec is not None
        return spec.submit_s

    def due(self, t_s: float) -> Iterator[JobSpec]:
        """The jobs arriving at or before `t_s`, in order, each once."""
        pending = self._pending
        while self._next < len(pending):
            spec = pending[self._next]
            assert spec is not None
            if spec.submit_s > t_s:
                break
            pending[self._next] = None
            self._next += 1
            yield spec

    def add(self, spec: JobSpec, now_s: float) -> None:
        """A job arriving at `spec.submit_s` (not before `now_s`); ValueError if its id
        is used or its time has passed."""
        if spec.submit_s < now_s:
            raise ValueError(f"job {spec.job_id}: submit_s {spec.submit_s} is in the past")
        if spec.job_id in self._ids:
            raise ValueError(f"job {spec.job_id}: id already used")
        self._ids.add(spec.job_id)
        bisect.insort(self._pending, spec, lo=self._next, key=_pending_key)

    def withdraw(self, job_id: str) -> JobSpec | None:
        """Take a job that has not arrived out of the queue (None: there is none such)."""
        for i in range(self._next, len(self._pending)):
            if _due(self._pending[i]).job_id == job_id:
                return self._pending.pop(i)
        return None


def _due(spec: JobSpec | None) -> JobSpec:
    """A spec still to arrive (never None past `Arrivals._next`)."""
    assert spec is not None
    return spec


def _pending_key(spec: JobSpec | None) -> tuple[float, str]:
    return arrival_key(_due(spec))


class Clock:
    """The virtual time and when the next round is due (None: none asked for)."""

    __slots__ = ("by_event", "last_round_s", "next_round_s", "now_s", "round_interval_s")

    def __init__(self, round_interval_s: float, anchor: str = "grid") -> None:
        self.now_s = 0.0
        self.next_round_s: float | None = None
        self.round_interval_s = round_interval_s
        self.by_event = anchor == "event"
        self.last_round_s: float | None = None

    def request_round(self) -> None:
        """Something changed: make sure a round comes, at the first multiple of the
        interval at or after now (anchored to events: now, or one interval after the
        last round where that is later)."""
        interval = self.round_interval_s
        now = self.now_s
        if interval <= 0:
            at = now
        elif self.by_event:
            last = self.last_round_s
            at = now if last is None else max(now, last + interval)
        else:
            at = math.ceil(now / interval - 1e-9) * interval
        if self.next_round_s is None or at < self.next_round_s:
            self.next_round_s = at

    def take_round(self, t_s: float) -> bool:
        """Whether a round is due at `t_s`; if so it is no longer pending."""
        if self.next_round_s is not None and self.next_round_s <= t_s:
            self.next_round_s = None
            self.last_round_s = t_s
            return True
        return False
