"""Tiresias: discretized two-dimensional attained-service scheduling.

Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning", NSDI 2019,
and its simulator (github.com/SymbioticLab/Tiresias: `simulator/run_sim.py`
`dlas_sim_jobs`, `simulator/jobs.py`). Made by the registry; the simulator (or another
backend) calls `schedule` once a round.

- §3.2.2 2DAS: a job's attained service is GPUs x executed time, in GPU-seconds
  (`JobView.attained_gpu_s_at`: GPU-seconds held, restart overhead included, as the
  simulator's `executed_time x num_gpu` counts held time).
- §3.2.3 Priority discretization (discretized 2D-LAS): K queues split by
  `thresholds_gpu_s`; a job sits in the queue of its attained service, so crossing a
  threshold demotes it. Queues have strict priority; within a queue jobs go first in,
  first out by the time they entered it (then submit time, then id). Each round the
  jobs that should run are chosen greedily in that order against the GPUs alive (a
  gang that does not fit is skipped, as the simulator's count placement does); the
  running ones among them keep their GPUs, every other running job is preempted, then
  the newly admitted are placed in order.
- §3.2.3 starvation (STARVELIMIT = PROMOTEKNOB x executed time; the simulator's
  `solve_starvation`): a waiting job below Q0 whose waiting since it last entered Q0
  (its first start, or its last promotion) reaches `starve_limit` x its running since
  then is promoted to Q0, and its queue counts service afresh from there (the
  simulator zeroes `executed_time`).
- §3.2.2 Eq. 1, discretized 2D-Gittins index, when `service_samples_gpu_s` is given:
  G(a, Δ) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a] over the samples
  (`policies.tiresias.gittins`). Queues stay; within a queue the higher index goes first, with
  Δ the rest of the job's queue (its upper threshold minus a; infinite in the last).
- §3.3 Placement: a job whose model is skewed (`catalog.resolve(model).skewed`: VGG,
  AlexNet, ...) runs only on the fewest nodes its gang can take (ceil(GPUs / largest
  node)), else it waits ("AwaitingConsolidation"); other models take what the placer
  gives (`policies.tiresias.placement`). Either search runs over the nodes the
  GPU-choice filter leaves the job (controller.model.gpu_choice.candidates: no cordoned node,
  GPU models it accepts, CPU and memory for its pods), and with quotas a start its
  queue does not allow waits with the quota's reason (`GpuFilter`; gpuflow's, the
  paper has no quotas). A job the round stops gives its GPUs back to its quota as
  well (as the check after the policy counts a plan's stops), and is kept if
  neither its GPUs nor its quota's room were taken since (`GpuFilter.keep`).
- Heterogeneous clusters (gpuflow's, issue 31 item 3; the paper's testbed and
  simulator have one GPU type): where a job is placed, it goes to the GPU type on
  which it runs fastest at its gang size, among the types with room
  (`controller.model.gpu_choice.gpu_type`: the backend's speeds per type, the throughput
  matrix's in a replay given `--throughputs`, else the performance model's), a skewed
  job's fewest nodes sought within its types in that order; only where no single
  type has room does it span types, running at its slowest GPU's speed. Admission is
  by GPU count as before: a job is admitted if its gang fits the GPUs alive, whatever
  their type, and the type never changes a queue's order (attained service counts
  GPU-seconds, not work). A running job keeps its GPUs. On a cluster of one type the
  placement is the placer's, as always, and `aware=False` leaves it the placer's on
  any cluster (blind to types, as Gavel compares against).

Cross-round memory is `TiresiasState` (`Plan.state`, `policies.tiresias.state`):
queue entries below Q0 and promotions (`policies.tiresias.ledger`), and the waiting
and the running jobs ranked as of the round (`policies.tiresias.waiting`,
`policies.tiresias.running`), all handed from state to state copy-on-write. A round
brings them up to date from the backend's record of the waiting jobs that changed,
the jobs that started or stopped, and the running jobs due to cross a threshold, so
that it costs the changes and the head of the queues it reads rather than every
active job. `wake_s`: the first threshold crossing or starvation limit to come.

Deviations:
- Thresholds follow the simulator's `_TFJobs` (3 queues split at 3250 and 7200);
  the simulator compares executed time x num_gpu, gpuflow GPU-seconds held (the same
  for whole-GPU gangs).
- The simulator keeps running jobs ahead of waiting ones within a queue (it moves
  pending jobs to the back each round); here a queue is FIFO by entry time, so a
  waiting job that entered a queue earlier may preempt a running job of that queue.
  `running_first=True` follows the simulator: within a queue the running jobs are
  kept first (in their order), the waiting ones after them, so only a job of a
  higher-priority queue preempts (ElasticFlow's simulator's `dlas-gpu` does the
  same; bench/deadlines.py's ElasticFlow setting).
- Promotion counts waiting as wall time since the last entry to Q0 minus executed time
  (the simulator skips time waited in Q0 after a promotion before running again).
- Eq. 1 takes the supremum over Δ; the discretized index here fixes Δ to the rest of
  the queue (the simulator fixes Δ = 3250 GPU-s). Indices are re-read every round
  (per whole GPU-second of service); their drift between rounds wakes nobody.
- A running job whose preemption would free GPUs no admitted gang could use is kept
  (a gang admitted by count may still not place), and GPUs left free by such a gang
  are backfilled by later jobs in priority order. No job is preempted to consolidate
  a skewed one.
- Restart cost: Tiresias preempts by priority, not for a gain it compares, so there
  is no comparison to charge a restart in. As in the paper, preemptions are bounded
  by the discretized queues (§3.2.3: a job is preempted only when a job of a higher
  queue needs its GPUs, not whenever continuous attained service would reorder them)
  and the promotion knob, and a restarted job's overhead counts in its attained
  service (GPU-seconds held), so a job restarted often is demoted sooner.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, chain, pairwise
from typing import Any

from controller.model import Allocation, GpuPool, JobView, Plan, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.gpu_choice.gpu_type import type_placer
from policies.tiresias.gittins import ServiceDistribution
from policies.tiresias.ledger import Ledger, Promotion, Records
from policies.tiresias.placement import place
from policies.tiresias.running import (
    KeptRunning,
    RunningRanking,
    first_crossing,
    rank_all_running,
    rerank_all_running,
    rerank_running,
)
from policies.tiresias.state import TiresiasState
from policies.tiresias.waiting import (
    Entry,
    KeptWaiting,
    Ranking,
    rank_all,
    rank_changed,
    starves_at,
)

# Simulator defaults (`simulator/jobs.py`, `_TFJobs.__init__`: num_queue = 3 and
# queue_limit = [3250, 7200, 18000], of which the first num_queue - 1 split the queues).
DEFAULT_THRESHOLDS_GPU_S = (3250.0, 7200.0)
# PROMOTEKNOB: waiting, as a multiple of the time run since the last entry to Q0, that
# promotes a job. The simulator's default run (`dlas-gpu`) has none; its sweeps use 0.5
# to 1000 (`dlas-gpu-05` .. `dlas-gpu-1000`, `dlas-gpu-gittins-1` .. `-8`). 8, the
# largest Gittins setting, gave the lowest average JCT of 0, 2 and 8 on gpuflow's
# synthetic replays (300 jobs, 4x4 GPUs, load 1.3, seeds 1 and 2).
DEFAULT_STARVE_LIMIT = 8.0

__all__ = ["Promotion", "Tiresias", "TiresiasState"]


_NO_STATE = TiresiasState()


@dataclass(frozen=True)
class Tiresias:
    thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S
    starve_limit: float = DEFAULT_STARVE_LIMIT  # 0 turns promotion off
    service_samples_gpu_s: tuple[float, ...] = ()
    # Place each job on its fastest GPU type with room (controller.model.gpu_choice.gpu_type);
    # False: blind to types, the backend's placer as it is (the comparison of Gavel §7).
    aware: bool = True
    # Within a queue, running jobs ahead of waiting ones, as the simulator's
    # `dlas_sim_jobs` orders them (see Deviations); False: FIFO by entry time.
    running_first: bool = False
    name: str = "tiresias"
    _dist: ServiceDistribution | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limits = tuple(float(t) for t in self.thresholds_gpu_s)
        if any(t <= 0 for t in limits) or any(a >= b for a, b in pairwise(limits)):
            raise ValueError(f"thresholds must be positive and increasing, got {limits}")
        if self.starve_limit < 0:
            raise ValueError(f"starve_limit must be >= 0, got {self.starve_limit}")
        object.__setattr__(self, "thresholds_gpu_s", limits)
        samples = tuple(self.service_samples_gpu_s)
        object.__setattr__(self, "service_samples_gpu_s", samples)
        dist = ServiceDistribution.from_samples(samples) if samples else None
        object.__setattr__(self, "_dist", dist)

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        prev = state if isinstance(state, TiresiasState) else _NO_STATE
        if self.aware:
            snapshot = snapshot.with_placer(type_placer(snapshot))  # the fastest GPU type
        round_ = _Round(snapshot)
        kept, records = self._rank(snapshot, prev, round_)
        self._admit(snapshot, round_, kept)
        self._place(snapshot, round_, kept)
        default = Reason(
            "LowerPriorityQueue",
            f"the GPUs go to jobs of Q{round_.lowest_admitted} or higher-priority queues "
            "(and earlier arrivals in the same queue)",
        )
        next_state = TiresiasState(kept=kept, running=round_.kept_running, records=records)
        kept.holder = next_state
        return Plan(
            run=round_.run,
            reasons=round_.reasons,
            default_reason=default,
            state=next_state,
            wake_s=self._wake_s(snapshot, round_, kept),
        )

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Queue by queue (Q0 first), within one the running jobs first if
        `running_first`, then by Gittins index if given, then by the time the job
        entered the queue (promotions counted), submit time, id."""
        now, limits = snapshot.now_s, self.thresholds_gpu_s
        st = state if isinstance(state, TiresiasState) else _NO_STATE
        cache: dict[tuple[int, int], float] = {}
        keyed: list[tuple[int, bool, float, float, float, str]] = []
        for job in snapshot.jobs:
            jid, promo = job.job_id, st.promotions.get(job.job_id)
            service = job.attained_gpu_s_at(now) - (promo.attained_gpu_s if promo else 0.0)
            q = bisect_right(limits, service)
            entry = st.entered.get(jid)
            if q:
                since = entry[1] if entry is not None and entry[0] == q else now
            else:
                since = promo.at_s if promo is not None else job.spec.submit_s
            g = -self._index(q, service, cache) if self._dist else 0.0
            waits = self.running_first and job.allocation is None
            keyed.append((q, waits, g, since, job.spec.submit_s, jid))
        return [k[5] for k in sorted(keyed)]

    def _rank(
        self, snapshot: Snapshot, prev: TiresiasState, round_: _Round
    ) -> tuple[KeptWaiting, Records]:
        """Bring the running and the waiting jobs' rankings to this round: from the
        state's kept rankings and the backend's changes where both are at hand, else
        every job (the same entries either way); and the next state's records."""
        taken = prev.take_kept()
        if taken is not None and taken[0].source is not snapshot.ordered:
            taken = None  # kept on another backend: its marks mean nothing here
        mark, changed = snapshot.waiting_changes(taken[0].mark if taken is not None else None)
        gittins = round_.gittins  # -index by (queue, service): the highest goes first
        index = (lambda q, service: -self._index(q, service, gittins)) if self._dist else None
        ranking = Ranking(self.thresholds_gpu_s, self.starve_limit, index)
        running_ranking = RunningRanking(self.thresholds_gpu_s, index)
        now = round_.now
        if taken is None or changed is None:
            records = Records({}, {})
            ledger = Ledger(*records.own())
            entered, promotions = prev.entered, prev.promotions
            running = rank_all_running(
                running_ranking, snapshot.running(), entered, promotions, now, ledger
            )
            kept = KeptWaiting(len(running.buckets), mark, snapshot.ordered)
            rank_all(ranking, snapshot.waiting(), entered, promotions, now, kept, ledger)
        else:
            kept, running = taken
            ledger, records = prev.hand_on()
            if self._dist is None:
                rerank_running(running_ranking, running, snapshot, ledger)
            else:  # the index moves with service: every running job, every round
                running = rerank_all_running(running_ranking, running, snapshot, ledger)
            rank_changed(
                ranking, changed, snapshot, ledger.entered, ledger.promotions, kept, ledger
            )
            kept.mark = mark
        round_.kept_running, round_.promotions = running, ledger.promotions
        round_.running = running.buckets
        return kept, records

    def _index(self, q: int, service: float, cache: dict[tuple[int, int], float]) -> float:
        """Gittins index (Eq. 1) of `service` with Δ the rest of queue q, cached per
        whole GPU-second."""
        key = (q, int(service))
        index = cache.get(key)
        if index is None:
            assert self._dist is not None
            a = float(key[1])
            top = self.thresholds_gpu_s[q] if q < len(self.thresholds_gpu_s) else math.inf
            index = self._dist.index(a, top - a)
            cache[key] = index
        return index

    def _admit(self, snapshot: Snapshot, round_: _Round, kept: KeptWaiting) -> None:
        """Walk the queues in priority order against the GPUs alive, skipping a gang
        that does not fit: running jobs chosen are kept, waiting ones admitted. Only
        the head of the queues is read: the walk stops when the GPUs run out."""
        budget = _alive_gpus(snapshot)
        needs = round_.kept_running.needs
        for q, running in enumerate(round_.running):
            if budget == 0:
                round_.rest.append((q, None))
                continue
            budget = self._walk(q, running, needs[q], kept.buckets[q], budget, round_)

    def _walk(
        self,
        q: int,
        running: list[Entry],
        needs: list[int],
        waiting: Iterable[Entry],
        budget: int,
        round_: _Round,
    ) -> int:
        """One queue of `_admit`'s walk: its running and waiting jobs merged in order
        (with `running_first`, every running job before the first waiting one).
        The running jobs between two waiting ones are kept at once when they need
        fewer GPUs than are left (then each fits, and the GPUs do not run out among
        them); else one by one. Returns the GPUs left."""
        before = list(accumulate(needs, initial=0))  # GPUs of the running before each
        i, end = 0, len(running)
        for w in chain(waiting, (None,)):
            j = end if w is None or self.running_first else bisect_left(running, w, i)
            if i < j:
                if before[j] - before[i] < budget:
                    budget -= before[j] - before[i]
                    round_.lowest_admitted = q
                else:
                    for entry in running[i:j]:
                        if entry[5] > budget:
                            round_.dropped.append((q, entry[4]))
                            continue
                        budget -= entry[5]
                        round_.lowest_admitted = q
                        if budget == 0:
                            round_.rest.append((q, entry))
                            if self.running_first:
                                round_.waiting_unwalked.add(q)
                            return 0
                i = j
            if w is None:
                return budget
            if w[5] > budget:
                round_.passed.append((q, w))
                continue
            budget -= w[5]
            round_.lowest_admitted = q
            round_.admitted.append((q, w))
            if budget == 0:
                round_.rest.append((q, w))
                if self.running_first:
                    round_.running_walked.add(q)
                return 0
        return budget

    def _stopped(self, snapshot: Snapshot, round_: _Round) -> list[tuple[int, JobView]]:
        """The running jobs not kept: those skipped, then those after the walk ended
        (in order in the queue it ended in, as the snapshot lists them below it); as
        the snapshot has them (a kept entry's view may be an earlier round's)."""
        stopped = list(round_.dropped)
        for q, after in round_.rest:
            if q in round_.running_walked:
                continue  # the walk ended among its waiting jobs, past every running one
            running = round_.running[q]
            entries = running if after is None else running[bisect_right(running, after) :]
            stopped.extend((q, e[4]) for e in entries)
        job_of = snapshot.job
        return [(q, job_of(job.job_id) or job) for q, job in stopped]

    def _later(self, round_: _Round, kept: KeptWaiting) -> Iterator[tuple[int, Entry]]:
        """The waiting jobs after the walk ended, in priority order."""
        for q, after in round_.rest:
            bucket = kept.buckets[q]
            unwalked = after is None or q in round_.waiting_unwalked
            entries = bucket if unwalked else bucket.irange(after, inclusive=(False, True))
            for entry in entries:
                yield q, entry

    def _place(self, snapshot: Snapshot, round_: _Round, kept: KeptWaiting) -> None:
        """Stop the running jobs not kept, place the admitted in order; then keep the
        stopped jobs whose GPUs nobody took and backfill what is left free. (A stopped
        job leaves the plan only if it is not kept: the plan is a mapping, and the
        backend applies it in job id order.)"""
        stopped = self._stopped(snapshot, round_)
        if not stopped and not round_.admitted:
            return
        run, pool = round_.run, snapshot.free_pool()
        # The GPU-choice filter's quota half: the stopped jobs' GPUs go back to their
        # quotas too; a stopped job is kept only if nobody took its GPUs or its quota.
        chooser = GpuFilter(snapshot)
        for _, job in stopped:
            assert job.allocation is not None
            pool.release(job.allocation, job.spec.gpu_mem_mib)
            chooser.release(job)
        for q, entry in round_.admitted:
            reason = self._start(chooser, pool, q, entry, round_)
            if reason is not None:
                round_.reasons[entry[3]] = reason
        for q, job in stopped:
            alloc = job.allocation
            assert alloc is not None
            if pool.fits(alloc, job.spec.gpu_mem_mib) and chooser.keep(job):
                pool.claim(alloc, job.spec.gpu_mem_mib)
                continue
            del run[job.job_id]
            round_.preempted.append(job)
            round_.reasons[job.job_id] = Reason(
                "Preempted",
                f"preempted in Q{q}: jobs of higher priority need its GPUs or its quota",
            )
        if pool.total_free:
            for q, entry in chain(round_.passed, self._later(round_, kept)):
                if pool.total_free == 0:
                    break
                if entry[5] <= pool.total_free:
                    self._start(chooser, pool, q, entry, round_)  # else it waits, passed

    def _start(
        self, chooser: GpuFilter, pool: GpuPool, q: int, entry: Entry, round_: _Round
    ) -> Reason | None:
        """Place a waiting job into `pool` and the plan (§3.3); or why it cannot start
        (its queue's quota among them)."""
        job = entry[4]
        alloc = place(chooser.snapshot, pool, job, entry[5], q)
        if isinstance(alloc, Reason):
            return alloc
        refused = chooser.quota_refusal(job, alloc)
        if refused is not None:
            return refused
        pool.claim(alloc, job.spec.gpu_mem_mib)  # a placer's allocation fits its pool
        chooser.grant(job, alloc)
        round_.run[job.job_id] = alloc
        if q < len(self.thresholds_gpu_s):
            left = self.thresholds_gpu_s[q] - entry[6]
            round_.crossings.append((round_.now + left / alloc.gpu_weight, job.job_id))
        return None

    def _wake_s(self, snapshot: Snapshot, round_: _Round, kept: KeptWaiting) -> float | None:
        """The first threshold crossing of a job that runs after this round, or the
        first starvation limit of a job that waits after it."""
        now, run, promotions = round_.now, round_.run, round_.promotions
        wake = first_crossing(
            RunningRanking(self.thresholds_gpu_s, None),
            round_.kept_running,
            promotions.get,
            snapshot.job,
            run,
            now,
        )
        for t, jid in round_.crossings:  # the jobs started this round
            if now < t < wake and jid in run:
                wake = t
        starving = kept.first_starving(run)
        if starving is not None and starving < wake:
            wake = starving
        if self.starve_limit:
            for job in round_.preempted:
                promo = promotions.get(job.job_id)
                executed = job.executed_s_at(now)
                starve_s = starves_at(job, promo, executed, self.starve_limit)
                if starve_s is not None and now < starve_s < wake:
                    wake = starve_s
        return wake if wake < math.inf else None


class _Round:
    """The scratch record of one `schedule` call (never kept across rounds)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.now = snapshot.now_s
        self.run: dict[str, Allocation] = snapshot.allocations()
        self.reasons: dict[str, Reason] = {}
        self.promotions: Mapping[str, Promotion] = {}  # the next state's
        self.gittins: dict[tuple[int, int], float] = {}
        self.kept_running: KeptRunning  # the running jobs ranked (set by `_rank`)
        self.running: list[list[Entry]] = []  # its entries by queue
        # (time, job) a job started this round crosses its queue's threshold.
        self.crossings: list[tuple[float, str]] = []
        self.admitted: list[tuple[int, Entry]] = []
        self.passed: list[tuple[int, Entry]] = []  # waiting, skipped: did not fit
        self.dropped: list[tuple[int, JobView]] = []  # running, skipped: did not fit
        # Where the walk ended in each queue it did not finish: after this entry, or
        # (None) before the queue's first.
        self.rest: list[tuple[int, Entry | None]] = []
        self.preempted: list[JobView] = []
        self.lowest_admitted = 0
        # Queues whose walk ended at a waiting job after all their running ones
        # (`running_first`): none of their running jobs is stopped for being after it.
        self.running_walked: set[int] = set()
        # ...and those whose walk ended among their running jobs, before any waiting
        # one: all their waiting jobs come after it.
        self.waiting_unwalked: set[int] = set()


def _alive_gpus(snapshot: Snapshot) -> int:
    down = sum(snapshot.cluster.nodes[n].num_gpus for n in snapshot.down_nodes)
    return snapshot.cluster.num_gpus - down
