"""Tiresias' waiting jobs: each ranked into its queue, and kept ranked between rounds.

Called by `policies.tiresias` each round. A waiting job's place (its queue, the time
it entered it, its Gittins index) and its starvation limit depend only on its view and
on what the state says of it (its promotion, its queue entry), so they stay the same
while the job waits and its view does not change, until its limit comes and it is
promoted. `KeptWaiting` keeps them between rounds, one sorted list per queue; on a
backend that records which waiting jobs changed (`Snapshot.waiting_changes`: the
simulator), a round re-ranks only those and the starved, so that its cost follows
what changed and not the length of the queue. Elsewhere (the Kubernetes backend,
hand-built snapshots) every round ranks every waiting job, as `rank_all` does.

Copy-on-write: a `KeptWaiting` belongs to one `TiresiasState` at a time (`holder`).
The round that takes it from the state it was given changes it in place and hands it
to the state it returns; a second round on the first state (the invariant suite calls
a policy twice on one state) finds it taken and ranks every waiting job afresh, from
that state's own `entered` and `promotions`, which gives the same entries.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sortedcontainers import SortedList

from controller.model import JobView, Snapshot
from policies.tiresias.ledger import Ledger, Promotion

# One job in its queue: (-Gittins index, time it entered the queue, submit time, id,
# view, GPUs it needs, attained service counted by the queues). Job ids are unique,
# so sorting never compares past the id.
Entry = tuple[float, float, float, str, JobView, int, float]

# (queue, service counted by the queues) -> -Gittins index; None: no index, 0 for all.
IndexOf = Callable[[int, float], float] | None


class Ranked(NamedTuple):
    """A waiting job's rank this round and what the state keeps of it."""

    queue: int
    entry: Entry
    promotion: Promotion | None
    entered: tuple[int, float] | None  # (queue, time it entered it); None in Q0
    starves_s: float | None  # its starvation limit to come, if any


@dataclass(frozen=True)
class Ranking:
    """How waiting jobs are ranked: the queues' thresholds, PROMOTEKNOB, the index."""

    limits: tuple[float, ...]
    knob: float
    index: IndexOf

    def rank(
        self,
        job: JobView,
        promo: Promotion | None,
        entered: tuple[int, float] | None,
        now: float,
    ) -> Ranked:
        """The job's queue and entry (§3.2.3), promoting it if it has starved by now."""
        spec = job.spec
        service = job.attained_gpu_s
        if promo is not None:
            service -= promo.attained_gpu_s
        q = bisect_right(self.limits, service)
        starves_s = None
        if q and self.knob:
            starves_s = starves_at(job, promo, job.executed_s, self.knob)
            if starves_s is not None and starves_s <= now:
                promo, service, q, starves_s = promotion(job, promo, starves_s), 0.0, 0, None
        if q:
            if entered is None or entered[0] != q:
                entered = (q, crossed_at(job, service - self.limits[q - 1], now))
            since = entered[1]
        else:
            entered = None
            since = promo.at_s if promo is not None else spec.submit_s
        g = self.index(q, service) if self.index is not None else 0.0
        entry = (g, since, spec.submit_s, job.job_id, job, spec.num_gpus, service)
        return Ranked(q, entry, promo, entered, starves_s)


class KeptWaiting:
    """The waiting jobs ranked as of one round: per queue in order, and by limit."""

    __slots__ = ("buckets", "holder", "mark", "ranked", "source", "starving")

    def __init__(self, num_queues: int, mark: int | None, source: object) -> None:
        self.buckets: list[SortedList] = [SortedList() for _ in range(num_queues)]
        self.ranked: dict[str, Ranked] = {}
        self.starving = SortedList()  # (starvation limit, job id)
        self.mark = mark  # the backend's change mark as of that round
        self.source = source  # the backend's index that gave the mark
        self.holder: object = None  # the state it belongs to

    def put(self, ranked: Ranked) -> None:
        jid = ranked.entry[3]
        self.ranked[jid] = ranked
        self.buckets[ranked.queue].add(ranked.entry)
        if ranked.starves_s is not None:
            self.starving.add((ranked.starves_s, jid))

    def drop(self, job_id: str) -> None:
        ranked = self.ranked.pop(job_id, None)
        if ranked is not None:
            self.buckets[ranked.queue].remove(ranked.entry)
            if ranked.starves_s is not None:
                self.starving.remove((ranked.starves_s, job_id))

    def first_starving(self, exclude: Mapping[str, object]) -> float | None:
        """The first starvation limit of a job not in `exclude` (those that run)."""
        for t, jid in self.starving:
            if jid not in exclude:
                return float(t)
        return None


def rank_all(
    ranking: Ranking,
    waiting: Iterable[JobView],
    entered: Mapping[str, tuple[int, float]],
    promotions: Mapping[str, Promotion],
    now: float,
    kept: KeptWaiting,
    ledger: Ledger,
) -> None:
    """Rank every waiting job into the empty `kept` (from the state's records)."""
    buckets: list[list[Entry]] = [[] for _ in kept.buckets]
    starving: list[tuple[float, str]] = []
    ranked_by_id = kept.ranked
    for job in waiting:
        jid = job.job_id
        ranked = ranking.rank(job, promotions.get(jid), entered.get(jid), now)
        ranked_by_id[jid] = ranked
        buckets[ranked.queue].append(ranked.entry)
        if ranked.starves_s is not None:
            starving.append((ranked.starves_s, jid))
        ledger.note(jid, ranked.entered, ranked.promotion)
    kept.buckets = [SortedList(b) for b in buckets]
    kept.starving = SortedList(starving)


def rank_changed(
    ranking: Ranking,
    changed: Iterable[str],
    snapshot: Snapshot,
    entered: Mapping[str, tuple[int, float]],
    promotions: Mapping[str, Promotion],
    kept: KeptWaiting,
    ledger: Ledger,
) -> None:
    """Bring `kept` from its round to `snapshot`'s: re-rank the jobs whose waiting
    view changed (`changed`) and those whose limit has come."""
    running, now = snapshot.current, snapshot.now_s
    assert running is not None
    for jid in dict.fromkeys(changed):
        kept.drop(jid)
        if jid in running:
            continue
        job = snapshot.job(jid)
        if job is None:
            ledger.forget(jid)  # gone: cancelled while it waited
        else:
            ranked = ranking.rank(job, promotions.get(jid), entered.get(jid), now)
            kept.put(ranked)
            ledger.note(jid, ranked.entered, ranked.promotion)
    starving = kept.starving
    while starving and starving[0][0] <= now:
        jid = starving[0][1]
        job = kept.ranked[jid].entry[4]
        kept.drop(jid)
        ranked = ranking.rank(job, promotions.get(jid), entered.get(jid), now)
        kept.put(ranked)
        ledger.note(jid, ranked.entered, ranked.promotion)


def promotion(job: JobView, last: Promotion | None, starve_s: float) -> Promotion:
    """A waiting job's promotion to Q0 on reaching its starvation limit at `starve_s`."""
    count = last.count + 1 if last else 1
    at_s = max(starve_s, job.waiting_since_s)
    return Promotion(at_s, job.attained_gpu_s, job.executed_s, count)


def starves_at(
    job: JobView, promo: Promotion | None, executed_s: float, knob: float
) -> float | None:
    """When the job's waiting since it last entered Q0 (first start or promotion)
    reaches `knob` x its running since then; None if it has not run since.

    Waiting = (t - since) - ran, so the limit falls at since + ran x (1 + knob)."""
    since, ran = job.first_start_s, executed_s
    if promo is not None:
        since, ran = promo.at_s, executed_s - promo.executed_s
    if since is None or ran <= 0:
        return None
    return since + ran * (1.0 + knob)


def crossed_at(job: JobView, past_gpu_s: float, now: float) -> float:
    """When a job that is `past_gpu_s` beyond its queue's lower threshold crossed it: on
    the current run's slope if running, else when it last stopped."""
    if job.running and job.allocation is not None:
        return now - past_gpu_s / job.allocation.gpu_weight
    return min(job.mark_s, now)
