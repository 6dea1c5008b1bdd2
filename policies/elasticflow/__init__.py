"""ElasticFlow: deadline jobs admitted only when they can finish, scaled elastically.

Gu et al., "ElasticFlow: An Elastic Serverless Training Platform for Distributed Deep
Learning", ASPLOS 2023. Each round:

1. Admission control (§4.1). A job with a deadline seen for the first time is admitted
   only if, planned in deadline order with the jobs already admitted, every one of them
   still has a minimum satisfactory share (`policies.elasticflow.shares.plan_shares`, the
   fewest GPUs that finish it by its deadline given how its throughput scales), and
   the same holds within each guarantee over it: where the controller runs quotas, for
   its leaf queue and each queue above it, that queue's deadline jobs within its
   guarantee in the quota tree (`Snapshot.queues`; issue 32: a queue's guarantee bounds
   what its deadline jobs can be promised); where `queue_gpus` names its queue (its
   spec's queue, else its tenant), within that number instead.
   Otherwise it is refused at once (a `REFUSED` reason: it never runs) with what it
   would need and by when. A job without a deadline is admitted as best-effort.
2. Resource allocation (§4.2). The admitted jobs that can still make their deadlines
   get their planned share for the current slot first, in deadline order; the GPUs left
   go, one step at a time, to the job whose next size (the next power of two) has the
   highest marginal return: the seconds of its remaining run time saved per GPU added.
   A job that is not running is started first (its return has no bound); a running
   job grows past the GPUs it holds only where that saves more of its remaining run
   time than the restart costs (its model's `restart_s`, as Gandiva's migrations
   weigh it), so a job about to finish is not restarted on more GPUs. A job whose
   share no longer meets its deadline (the model erred, or a resize cost it time)
   becomes best-effort. So a best-effort job never takes the GPUs an admitted job's
   share needs.
3. Placement (§4.3, buddy allocation). Shares are powers of two and are placed largest
   first, each on the fewest servers (controller.model.gpu_choice.best_fit.fewest_servers: one
   server that holds it, best fit, else whole servers), which on servers of a
   power-of-two size places every block on servers of its own without fragmenting
   the others. A running job whose
   size is unchanged keeps its GPUs; if the others do not then fit, everything is
   placed again from an empty cluster (a migration). Each job's fewest servers are
   sought over the pool the GPU-choice filter leaves it (controller.model.gpu_choice.candidates:
   no cordoned node, GPU models it accepts, CPU and memory for its pods) and taken
   with its pods' request; a share its queue does not allow (quotas) is not placed,
   and the job waits with the quota's reason.
4. Elastic scaling: a job's size changes whenever the allocation says so (the backend
   charges the restart); its batch size is kept, as ElasticFlow keeps the global batch.

Throughputs come from the performance model (controller.model.perf) at each size,
placed on the fewest servers, scaled for a live job that reports its throughput by
what it measures over what the model says at its size (`_measured_scale`). On
ElasticFlow's T4 cluster the model is within 20 % of the paper's T4 table at 87 % of
its points (docs/benchmarks.md, "Deadlines").

A refused job stays refused: a backend that withdraws it (the simulator) never shows
it again, and one that keeps it waiting (a live cluster, where the DLJob stays) sees
the same refusal every round (`ElasticFlowState.refused`), so it never runs.

Deviations: the admitted and refused jobs are the only memory between rounds
(`ElasticFlowState`); the plan is redone at every round from the jobs' progress, so an
admitted job's guarantee holds only as far as the performance model is right; a
queue's guarantee is the total of its quota over GPU models (the shares are planned
on the whole cluster, not per model);
non-elastic jobs (min_gpus = max_gpus) keep their one size; jobs are never suspended to host memory;
the restart a growth costs is weighed against its gain (step 2), where the paper's
marginal return is the gain alone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.model import Allocation, GpuPool, JobView, Plan, Reason, Snapshot
from controller.model.catalog import resolve
from controller.model.gpu_choice.best_fit import fewest_servers
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.job import FRAGMENTED, REFUSED
from controller.model.perf import throughput_ips
from policies.edf import deadline_key
from policies.elasticflow.shares import (
    Curve,
    Demand,
    Share,
    allowed_sizes,
    min_share,
    plan_shares,
)
from policies.size_caps import capped_max_gpus, check_caps


@dataclass(frozen=True, slots=True)
class ElasticFlowState:
    """What ElasticFlow remembers between rounds: the jobs it has admitted, and the
    ones it refused with why."""

    admitted: frozenset[str] = frozenset()
    refused: Mapping[str, Reason] = field(default_factory=dict)


@dataclass(frozen=True)
class ElasticFlow:
    # Quotas: the GPUs the deadline jobs of each queue (JobSpec.queue, else its tenant)
    # may be promised together, its guarantee in the quota tree (docs/quotas.md);
    # a queue not named is bounded by the cluster alone.
    queue_gpus: Mapping[str, int] = field(default_factory=dict)
    # A job's largest size capped by model or "model:batch" (policies.size_caps);
    # ElasticFlow's evaluation caps it at models.get_max_gpu (bench/deadlines.py).
    max_gpus_by: Mapping[str, int] = field(default_factory=dict)
    name: str = "elasticflow"
    # Throughputs by (cluster, model, batch, precision, GPUs): a memo of the
    # performance model, not state (the same inputs give the same rate).
    _rates: dict[tuple[object, ...], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for queue, gpus in self.queue_gpus.items():
            if gpus < 0:
                raise ValueError(f"queue_gpus[{queue!r}] must be >= 0, got {gpus}")
        check_caps(self.max_gpus_by)

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        if not isinstance(state, ElasticFlowState):
            state = ElasticFlowState()
        previous = state.admitted
        now, capacity = snapshot.now_s, sum(snapshot.usable_gpus())
        jobs = sorted(snapshot.jobs, key=deadline_key)
        curves = {job.job_id: self.speed_curve(snapshot, job) for job in jobs}
        demands = {
            job.job_id: _demand(job, now, curves[job.job_id])
            for job in jobs
            if job.spec.due_s is not None
        }
        admitted = [j for j in jobs if j.job_id in previous and j.job_id in demands]
        shares, _ = plan_shares(now, capacity, [demands[j.job_id] for j in admitted])
        reasons = {j.job_id: state.refused[j.job_id] for j in jobs if j.job_id in state.refused}
        kept = {j.job_id for j in jobs if j.job_id in previous or j.job_id not in demands}
        for job in jobs:
            if job.job_id in kept or job.job_id in reasons:
                continue
            trial = [demands[j.job_id] for j in admitted if j.job_id in shares]
            trial.append(demands[job.job_id])
            trial.sort(key=lambda d: (d.due_s, d.job_id))
            planned, missed = plan_shares(now, capacity, trial)
            if missed:
                reasons[job.job_id] = _refusal(job, demands[job.job_id], now, capacity)
                continue
            over = self._over_guarantee(snapshot, job, admitted, shares, demands)
            if over is not None:
                reasons[job.job_id] = over
                continue
            kept.add(job.job_id)
            admitted.append(job)
            shares = planned
        sizes = _allocate([j for j in jobs if j.job_id in kept], shares, curves, now, capacity)
        run, placed_reasons = _place(snapshot, sizes)
        refused = {k: v for k, v in reasons.items() if v.code == REFUSED}
        reasons.update(placed_reasons)
        for job in jobs:
            if job.job_id in kept and job.job_id not in run and job.job_id not in reasons:
                reasons[job.job_id] = Reason(
                    "NoShare",
                    "no GPUs are left after the admitted jobs' minimum satisfactory shares "
                    "and the jobs with a higher marginal return",
                )
        return Plan(run=run, reasons=reasons, state=ElasticFlowState(frozenset(kept), refused))

    def _over_guarantee(
        self,
        snapshot: Snapshot,
        job: JobView,
        admitted: list[JobView],
        shares: dict[str, Share],
        demands: dict[str, Demand],
    ) -> Reason | None:
        """The refusal of `job` when a guarantee over it (`_guarantees`) cannot hold the
        shares of the deadline jobs admitted under it so far and its own; else None."""
        now_s = snapshot.now_s
        for queue, bound, under in self._guarantees(snapshot, job):
            same = [demands[j.job_id] for j in admitted if j.job_id in shares and queue in under(j)]
            trial = sorted([*same, demands[job.job_id]], key=lambda d: (d.due_s, d.job_id))
            _, missed = plan_shares(now_s, bound, trial)
            if not missed:
                continue
            alone = min_share(now_s, bound, demands[job.job_id])
            need = f"{alone.gpus} GPUs" if alone is not None else "more GPUs than it holds"
            return Reason(
                REFUSED,
                f"needs {need} of queue {queue}'s guarantee of {bound} to meet its deadline "
                f"at {demands[job.job_id].due_s:.0f} s; the queue's deadline jobs admitted "
                "before it leave too few",
            )
        return None

    def _guarantees(
        self, snapshot: Snapshot, job: JobView
    ) -> list[tuple[str, int, Callable[[JobView], Collection[str]]]]:
        """The guarantees that bound what `job` may be promised, each as (queue, GPUs,
        the queues a job counts in): `queue_gpus`'s entry for its queue where there is
        one, else, under quotas, its leaf's and every queue's above it in the tree."""
        queue = _queue(job)
        bound = self.queue_gpus.get(queue)
        if bound is not None:
            return [(queue, bound, lambda j: (_queue(j),))]
        tree = snapshot.queues
        leaf = tree.leaf_of(job.spec) if tree is not None else None
        if tree is None or leaf is None:
            return []

        def chain(other: JobView) -> Collection[str]:
            name = tree.leaf_of(other.spec)
            return () if name is None else tree.chain(name)

        out: list[tuple[str, int, Callable[[JobView], Collection[str]]]] = []
        for name in tree.chain(leaf):
            node = tree.node(name)
            assert node is not None
            out.append((name, node.guarantee.total, chain))
        return out

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Deadline order (none last), then submit time, then id."""
        return [j.job_id for j in sorted(snapshot.jobs, key=deadline_key)]

    def speed_curve(self, snapshot: Snapshot, job: JobView) -> Curve:
        """`job`'s iterations per second at each size it may run at (module docstring)."""
        spec, cluster = job.spec, snapshot.cluster
        top = capped_max_gpus(spec, self.max_gpus_by)
        sizes = allowed_sizes(spec.min_gpus, top, cluster.num_gpus)
        profile = resolve(spec.model)
        batch = job.batch_size if job.batch_size is not None else spec.batch_size
        empty = GpuPool.of_cluster(cluster)
        speeds = []
        for size in sizes:
            key = (cluster.name, cluster.num_gpus, spec.model, batch, spec.precision, size)
            rate = self._rates.get(key)
            if rate is None:
                alloc = fewest_servers(empty, size)
                rate = 0.0
                if alloc is not None:
                    rate = throughput_ips(
                        profile, cluster, alloc, batch_size=batch, precision=spec.precision
                    )
                self._rates[key] = rate
            speeds.append(rate)
        scale = _measured_scale(job, Curve(sizes, tuple(speeds)))
        return Curve(sizes, tuple(speed * scale for speed in speeds))


def _measured_scale(job: JobView, modelled: Curve) -> float:
    """What a running job that reports its throughput (a live job, `rate_source`
    "measured") measures over what the performance model says at its size: its whole
    curve is scaled by it, so its share follows what it does (1: nothing measured)."""
    if job.rate_source != "measured" or not job.running or job.allocation is None:
        return 1.0
    modelled_ips = modelled.speed(job.allocation.num_gpus)
    if modelled_ips <= 0 or job.rate_ips <= 0:
        return 1.0
    return job.rate_ips / modelled_ips


def _queue(job: JobView) -> str:
    return job.spec.queue or job.spec.tenant


def _demand(job: JobView, now_s: float, curve: Curve) -> Demand:
    due = job.spec.due_s
    assert due is not None
    return Demand(job.job_id, due, job.remaining_iters_at(now_s), curve)


def _refusal(job: JobView, demand: Demand, now_s: float, capacity: int) -> Reason:
    """Why `job` is refused: what it would need, and by when. A job no share can finish
    in time is told so in terms of itself alone (its deadline after its submission, its
    work's time on its most GPUs), so that the reason reads the same on every clock:
    REST, replay and the operator alike (issue 32's admission Show)."""
    alone = min_share(now_s, capacity, demand)
    steps = f"{demand.remaining:.0f} iterations"
    due = f"its deadline at {demand.due_s:.0f} s"
    if alone is None:
        top = demand.curve.sizes[-1] if demand.curve.sizes else 0
        speed = demand.curve.speed(top)
        takes = f"take {demand.remaining / speed:.0f} s" if speed > 0 else "never end"
        after = f"its deadline {job.spec.deadline_s or 0.0:.0f} s after submission"
        gpus = f"{top} GPU" + ("" if top == 1 else "s")
        return Reason(REFUSED, f"no share meets {after}: its {steps} on {gpus} {takes}")
    return Reason(
        REFUSED,
        f"needs {alone.gpus} GPUs from {now_s:.0f} s to {alone.finish_s:.0f} s to do its "
        f"{steps} by {due}; the jobs admitted before it leave too few",
    )


def _allocate(
    jobs: list[JobView],
    shares: dict[str, Share],
    curves: dict[str, Curve],
    now_s: float,
    capacity: int,
) -> dict[str, int]:
    """Each job's GPUs this slot: the admitted shares first, then the rest by marginal
    return (module docstring, step 2)."""
    sizes = {job_id: share.now_gpus for job_id, share in shares.items() if share.now_gpus}
    free = capacity - sum(sizes.values())
    by_id = {job.job_id: job for job in jobs}
    order = {job.job_id: rank for rank, job in enumerate(jobs)}
    heap: list[tuple[float, int, str, int]] = []

    def offer(job_id: str) -> None:
        curve, held = curves[job_id], sizes.get(job_id, 0)
        bigger = [s for s in curve.sizes if s > held]
        if not bigger:
            return
        step = bigger[0]
        now_ips, next_ips = curve.speed(held), curve.speed(step)
        if next_ips <= now_ips:
            return
        job = by_id[job_id]
        remaining = job.remaining_iters_at(now_s)
        if not _pays_restart(job, curve, step, remaining):
            return
        if now_ips == 0.0:
            gain = math.inf
        else:
            gain = (remaining / now_ips - remaining / next_ips) / (step - held)
        heapq.heappush(heap, (-gain, order[job_id], job_id, step))

    for job in jobs:
        offer(job.job_id)
    while heap and free > 0:
        _, _, job_id, step = heapq.heappop(heap)
        extra = step - sizes.get(job_id, 0)
        if extra > free:
            continue
        sizes[job_id] = step
        free -= extra
        offer(job_id)
    return sizes


def _pays_restart(job: JobView, curve: Curve, gpus: int, remaining: float) -> bool:
    """Whether a running `job` grown to `gpus` (past the GPUs it holds) saves more of
    its remaining run time than the restart costs (its model's `restart_s`); a job
    not running, or not grown past what it holds, restarts for nothing here."""
    alloc = job.allocation
    if not job.running or alloc is None or gpus <= alloc.num_gpus:
        return True
    held_ips, new_ips = curve.speed(alloc.num_gpus), curve.speed(gpus)
    if held_ips <= 0.0:
        return True
    saved_s = remaining / held_ips - remaining / new_ips
    return saved_s > resolve(job.spec.model).restart_s


def _place(
    snapshot: Snapshot, sizes: dict[str, int]
) -> tuple[dict[str, Allocation], dict[str, Reason]]:
    """Buddy placement of the sizes (module docstring, step 3)."""
    jobs = {job.job_id: job for job in snapshot.jobs if job.job_id in sizes}
    kept: dict[str, Allocation] = {}
    pool = snapshot.free_pool()
    stopped: list[JobView] = []
    for job in snapshot.running():
        if job.allocation is None:
            continue
        if sizes.get(job.job_id) == job.num_gpus:
            kept[job.job_id] = job.allocation
        else:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
            if job.job_id not in sizes:
                stopped.append(job)
    todo = sorted((j for j in jobs if j not in kept), key=lambda j: (-sizes[j], j))
    packed = _pack(_chooser(snapshot, stopped), pool.copy(), todo, sizes, jobs)
    if packed is not None:
        placed, refused = packed
        return {**kept, **placed}, refused
    for kept_id, held in kept.items():
        pool.release(held, jobs[kept_id].spec.gpu_mem_mib)
    chooser = _chooser(snapshot, stopped)
    run: dict[str, Allocation] = {}
    reasons: dict[str, Reason] = {}
    for job_id in sorted(jobs, key=lambda j: (-sizes[j], j)):
        placed_one = _place_one(chooser, pool, jobs[job_id], sizes[job_id])
        if isinstance(placed_one, Allocation):
            run[job_id] = placed_one
        else:  # only when nodes are down, cordoned or refuse it, or its queue does
            reasons[job_id] = placed_one or Reason(
                FRAGMENTED, f"given {sizes[job_id]} GPUs but no placement of them fits"
            )
    return run, reasons


def _chooser(snapshot: Snapshot, stopped: list[JobView]) -> GpuFilter:
    """The plan's GPU-choice filter, the jobs it stops given back to their queues."""
    chooser = GpuFilter(snapshot)
    for job in stopped:
        chooser.release(job)
    return chooser


def _pack(
    chooser: GpuFilter,
    pool: GpuPool,
    todo: list[str],
    sizes: dict[str, int],
    jobs: dict[str, JobView],
) -> tuple[dict[str, Allocation], dict[str, Reason]] | None:
    """The jobs of `todo` placed in that order, and those their queues refuse with
    the reason; None if one does not fit."""
    out: dict[str, Allocation] = {}
    refused: dict[str, Reason] = {}
    for job_id in todo:
        placed = _place_one(chooser, pool, jobs[job_id], sizes[job_id])
        if placed is None:
            return None
        if isinstance(placed, Reason):
            refused[job_id] = placed
        else:
            out[job_id] = placed
    return out, refused


def _place_one(
    chooser: GpuFilter, pool: GpuPool, job: JobView, size: int
) -> Allocation | Reason | None:
    """`size` GPUs for `job` on the fewest servers the filter leaves it, taken; where
    its queue does not allow them, the GPUs it holds (a running job, where they are
    still free) or the quota's reason; None where no placement fits."""
    alloc = fewest_servers(chooser.pool_for(pool, job.spec), size)
    if alloc is None:
        return None
    refused = chooser.quota_refusal(job, alloc)
    if refused is None:
        return chooser.take(pool, job, alloc)
    current = job.allocation if job.running else None
    if current is not None and pool.fits(current, job.spec.gpu_mem_mib):
        return chooser.take(pool, job, current)
    return refused
