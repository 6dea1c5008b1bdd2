"""Tiresias' running jobs: each ranked into its queue, and kept ranked between rounds.

Called by `policies.tiresias` each round. A running job's place in its queue (the time
it entered the queue, its submit time, its id) stays the same while it runs until its
attained service crosses the queue's upper threshold; without the Gittins index
nothing else moves it. `KeptRunning` keeps the running jobs ranked, one sorted list
per queue, with the time at which each crosses its threshold as of the round that
ranked it. A round ranks the jobs that started since the last one, drops those that
stopped and re-ranks those whose crossing is due (`rerank_running`), so that it costs
what changed and not every running job. With the Gittins index a running job's index
moves with its service, so every round ranks every running job
(`rerank_all_running`; `rank_all_running` where no ranking was kept).

Exactness: a crossing time computed at another round, or from another view of the
same run (the simulator rebuilds a view when it re-rates the job), may differ from the
one computed now in the last bits, and a crossing time becomes `wake_s`, an event
time. So kept crossing times only say which jobs to look at: every job whose kept
time is within `MARGIN_S` of now is re-ranked from its view as of the round, and the
first crossing to come is recomputed at the round's `now` for the jobs whose kept
time is within `MARGIN_S` of the first (`first_crossing`), as ranking every running
job would compute it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

from controller.model import JobView, Snapshot
from policies.tiresias.ledger import Ledger, Promotion
from policies.tiresias.waiting import Entry, IndexOf, crossed_at

# Kept crossing times are trusted to this margin. They differ from a crossing
# recomputed at another time only by floating rounding (a few ulps of times of about
# 1e7 s, divided by a gang's GPU weight: far below a microsecond); a second's margin
# costs the re-ranking of the jobs that cross within a second of a round.
MARGIN_S = 1.0


class Placed(NamedTuple):
    """A running job's rank as of the round that ranked it."""

    queue: int
    entry: Entry
    crosses_s: float  # when its service crosses its queue's upper threshold; inf in the last


@dataclass(frozen=True, slots=True)
class RunningRanking:
    """How running jobs are ranked: the queues' thresholds and the index."""

    limits: tuple[float, ...]
    index: IndexOf

    def service(self, job: JobView, promo: Promotion | None, now: float) -> float:
        """Attained service counted by the queues (`attained_gpu_s_at(now)` of a
        running job, less its service before its last promotion)."""
        alloc = job.allocation
        assert alloc is not None
        service = job.attained_gpu_s + alloc.gpu_weight * (now - job.mark_s)
        if promo is not None:
            service -= promo.attained_gpu_s
        return service

    def crossing(self, job: JobView, promo: Promotion | None, now: float) -> float:
        """When the running job's service crosses its queue's upper threshold."""
        service = self.service(job, promo, now)
        q = bisect_right(self.limits, service)
        if q == len(self.limits):
            return math.inf
        assert job.allocation is not None
        return now + (self.limits[q] - service) / job.allocation.gpu_weight

    def rank(
        self,
        job: JobView,
        promo: Promotion | None,
        entered: tuple[int, float] | None,
        now: float,
    ) -> tuple[Placed, tuple[int, float] | None]:
        """The running job's queue, entry and crossing (§3.2.3); and its queue entry
        for the state (None in Q0)."""
        alloc = job.allocation
        assert alloc is not None
        limits, weight = self.limits, alloc.gpu_weight
        service = self.service(job, promo, now)
        q = bisect_right(limits, service)
        crosses_s = now + (limits[q] - service) / weight if q < len(limits) else math.inf
        submit_s = job.spec.submit_s
        if q:
            if entered is None or entered[0] != q:
                entered = (q, crossed_at(job, service - limits[q - 1], now))
            since = entered[1]
        else:
            entered = None
            since = promo.at_s if promo is not None else submit_s
        g = self.index(q, service) if self.index is not None else 0.0
        entry = (g, since, submit_s, job.job_id, job, alloc.num_gpus, service)
        return Placed(q, entry, crosses_s), entered


class KeptRunning:
    """The running jobs ranked as of one round: per queue in order, and by crossing.

    Plain sorted lists: they hold at most a job per GPU (a few hundred), where an
    insertion's move of the list in C costs less than a `SortedList`'s bookkeeping."""

    __slots__ = ("buckets", "crossings", "needs", "placed")

    def __init__(self, num_queues: int) -> None:
        self.buckets: list[list[Entry]] = [[] for _ in range(num_queues)]
        self.needs: list[list[int]] = [[] for _ in range(num_queues)]  # GPUs, as buckets
        self.placed: dict[str, Placed] = {}
        self.crossings: list[tuple[float, str]] = []  # (time as of its ranking, job id)

    def put(self, placed: Placed) -> None:
        jid = placed.entry[3]
        self.placed[jid] = placed
        bucket = self.buckets[placed.queue]
        i = bisect_left(bucket, placed.entry)
        bucket.insert(i, placed.entry)
        self.needs[placed.queue].insert(i, placed.entry[5])
        if placed.crosses_s < math.inf:
            insort(self.crossings, (placed.crosses_s, jid))

    def drop(self, job_id: str) -> None:
        placed = self.placed.pop(job_id)
        bucket = self.buckets[placed.queue]
        i = bisect_left(bucket, placed.entry)
        del bucket[i]
        del self.needs[placed.queue][i]
        if placed.crosses_s < math.inf:
            crossings = self.crossings
            del crossings[bisect_left(crossings, (placed.crosses_s, job_id))]


def rank_all_running(
    ranking: RunningRanking,
    running: Iterable[JobView],
    entered: Mapping[str, tuple[int, float]],
    promotions: Mapping[str, Promotion],
    now: float,
    ledger: Ledger,
) -> KeptRunning:
    """Rank every running job (from the state's records) into a new `KeptRunning`."""
    kept = KeptRunning(len(ranking.limits) + 1)
    buckets: list[list[Entry]] = [[] for _ in kept.buckets]
    crossings: list[tuple[float, str]] = []
    promotion_of, entry_of = promotions.get, entered.get
    for job in running:
        jid = job.job_id
        promo = promotion_of(jid)
        placed, entry = ranking.rank(job, promo, entry_of(jid), now)
        kept.placed[jid] = placed
        buckets[placed.queue].append(placed.entry)
        if placed.crosses_s < math.inf:
            crossings.append((placed.crosses_s, jid))
        ledger.note(jid, entry, promo)
    kept.buckets = [sorted(b) for b in buckets]
    kept.needs = [[e[5] for e in b] for b in kept.buckets]
    crossings.sort()
    kept.crossings = crossings
    return kept


def rerank_running(
    ranking: RunningRanking,
    kept: KeptRunning,
    snapshot: Snapshot,
    ledger: Ledger,
) -> None:
    """Bring `kept` from its round to `snapshot`'s: drop the jobs that stopped (and
    forget those that left), rank those that started, re-rank those due to cross."""
    current, now = snapshot.current, snapshot.now_s
    assert current is not None
    forget_finished(kept, snapshot, ledger)
    job_of, promotions, entered = snapshot.job, ledger.promotions, ledger.entered
    started = sorted(current.keys() - kept.placed.keys())
    crossings = kept.crossings
    due = [jid for _, jid in crossings[: bisect_left(crossings, (now + MARGIN_S, ""))]]
    for jid in due:
        kept.drop(jid)
    for jid in chain(started, due):
        job = job_of(jid)
        assert job is not None
        placed, entry = ranking.rank(job, promotions.get(jid), entered.get(jid), now)
        kept.put(placed)
        ledger.note(jid, entry, promotions.get(jid))


def rerank_all_running(
    ranking: RunningRanking, kept: KeptRunning, snapshot: Snapshot, ledger: Ledger
) -> KeptRunning:
    """Rank every running job afresh from the ledger (with the Gittins index, whose
    value moves with service), forgetting those that left since `kept`'s round."""
    forget_finished(kept, snapshot, ledger)
    entered, promotions = ledger.entered, ledger.promotions
    return rank_all_running(
        ranking, snapshot.running(), entered, promotions, snapshot.now_s, ledger
    )


def forget_finished(kept: KeptRunning, snapshot: Snapshot, ledger: Ledger) -> None:
    """Drop the kept jobs that no longer run; forget those that have left."""
    current = snapshot.current
    assert current is not None
    for jid in sorted(kept.placed.keys() - current.keys()):
        kept.drop(jid)
        if snapshot.job(jid) is None:  # finished since
            ledger.forget(jid)


def first_crossing(
    ranking: RunningRanking,
    kept: KeptRunning,
    promotion_of: Callable[[str], Promotion | None],
    job_of: Callable[[str], JobView | None],
    run: Mapping[str, object],
    now: float,
) -> float:
    """The first threshold crossing after `now` of a kept job that runs on (in `run`),
    computed at `now` from its view as of the round; inf if none."""
    first = math.inf
    for t, jid in kept.crossings:
        if t > first + MARGIN_S:
            break
        if jid not in run:
            continue
        job = job_of(jid)
        assert job is not None
        exact = ranking.crossing(job, promotion_of(jid), now)
        if now < exact < first:
            first = exact
    return first
