"""From a plan to actions, once: what both backends carry out, and which plans they refuse.

`compile_plan` is called by each backend's `apply(plan)`: controller.sim.Simulator
on a virtual clock and operators.backend.KubeBackend on Kubernetes. It compares the
plan with the snapshot it was made from, names one `Action` per job that changes
(the vocabulary of controller.model.snapshot, classified by `classify_change`), and
refuses a plan that breaks the rules with PlanError before anything is carried out:
a backend that gets the list applies every action or none.

Cost: proportional to the jobs the plan changes. A plan that edits
`snapshot.allocations()` says which jobs it touched; any other plan is compared with
the running jobs' allocations by identity first (`plan_diff`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from operator import is_not, itemgetter

from controller.model import (
    RESTARTING,
    STOPPING,
    Action,
    Allocation,
    EditedAllocations,
    GpuPool,
    GpuShare,
    JobView,
    Plan,
    PlanError,
    Snapshot,
    classify_change,
)
from controller.model.snapshot import new_gpu_on_cordoned, over_allocated

STARTING = frozenset({Action.START, Action.RESUME}) | RESTARTING
# The same sets as tuples, for membership by identity: an Enum member's hash is a
# Python call, and `stops` and `starts` are asked several times per action.
_ENDS_RUN = tuple(STOPPING | RESTARTING)
_BEGINS_RUN = tuple(STARTING)


@dataclass(frozen=True, slots=True)
class JobAction:
    """One job's change. `allocation` is what it runs on afterwards (None when it
    stops); `batch_size` its batch afterwards (None: the job's own)."""

    job: JobView
    action: Action
    allocation: Allocation | None
    batch_size: int | None

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def stops(self) -> bool:
        """Whether the job's current run ends (for good, or to start again)."""
        return self.action in _ENDS_RUN

    @property
    def starts(self) -> bool:
        """Whether the job gets a new run (pods, or a restart overhead in replay)."""
        return self.action in _BEGINS_RUN


class _JobActionDraft:
    """JobAction's slots, writable: `_job_action` fills one with plain stores and
    makes it a JobAction (`__class__` assignment, allowed between classes of the
    same slots), as `controller.model.job.model_view` does for views."""

    __slots__ = JobAction.__slots__
    job: JobView
    action: Action
    allocation: Allocation | None
    batch_size: int | None


def _job_action(
    job: JobView, action: Action, allocation: Allocation | None, batch_size: int | None
) -> JobAction:
    """`JobAction(job, action, allocation, batch_size)` for a fraction of the frozen
    constructor's cost: compile_plan makes two a swap."""
    draft = _new(_JobActionDraft)
    draft.job = job
    draft.action = action
    draft.allocation = allocation
    draft.batch_size = batch_size
    draft.__class__ = JobAction  # type: ignore[assignment]
    return draft  # type: ignore[return-value]


_new = object.__new__


def plan_diff(
    run: Mapping[str, Allocation], current: Mapping[str, Allocation]
) -> tuple[list[str], list[str]]:
    """(jobs to start or change, running jobs to stop), each sorted.

    The simulator's hottest path (every round, every running job), so it uses set
    operations and identity comparisons that run in C: an allocation the policy kept
    is the very object of the current one; one rebuilt equal to it is reported as
    changed and recognised as kept by `classify_change`.
    """
    if isinstance(run, EditedAllocations) and run.origin is current:
        edited = run.edited
        stopped = sorted(k for k in edited if k not in run and k in current)
        changed = sorted(k for k in edited if k in run and run[k] is not current.get(k))
        return changed, stopped
    if run == current:
        return [], []
    stopped = sorted(current.keys() - run.keys())
    added = set(run.keys() - current.keys())
    common = list(run.keys() & current.keys())
    if common:
        pick = itemgetter(*common)
        mine, theirs = pick(run), pick(current)
        if len(common) == 1:
            mine, theirs = (mine,), (theirs,)
        added.update(compress(common, map(is_not, mine, theirs)))
    return sorted(added), stopped


def compile_plan(snapshot: Snapshot, plan: Plan, pool: GpuPool | None = None) -> list[JobAction]:
    """The actions that carry `plan` out on the world of `snapshot`, one per job that
    changes, by job id. A backend ends every run that `stops` (preemptions,
    suspensions, and the stop half of resizes, migrations and re-shares) before it
    begins any run that `starts`, and carries out REBATCH in place.

    Raises PlanError, naming the job, for a plan that runs an unknown job, gives a
    job a size outside its min..max, places it on a missing GPU or a down node, gives
    it a GPU it does not hold on a cordoned node, or over-allocates a GPU. `pool`
    (default: the snapshot's) is the free capacity; it is used for the check and left
    as it was.
    """
    assert snapshot.current is not None
    changed_ids, stopped_ids = plan_diff(plan.run, snapshot.current)
    candidates = set(changed_ids)
    candidates.update(k for k in plan.batch_sizes if k in plan.run)
    out: list[JobAction] = []
    for job_id in stopped_ids:
        job = _known(snapshot.job(job_id), job_id)
        action = classify_change(job, None, None, job_id in plan.suspend)
        assert action is not None
        out.append(_job_action(job, action, None, None))
    run, batch_sizes = plan.run, plan.batch_sizes
    for job_id in sorted(candidates):
        job = _known(snapshot.job(job_id), job_id)
        target = run[job_id]
        batch = batch_sizes.get(job_id, job.batch_size)
        action = classify_change(job, target, batch, False)
        if action is None or action is Action.KEEP:
            continue
        if action is not Action.REBATCH:
            _check_placement(snapshot, job, target)
        # The job's pods take its CPU and memory on each node, whoever chose the GPUs.
        host = job.spec.host
        if host is not target.host:
            target = target.with_host(host)
        out.append(_job_action(job, action, target, batch))
    _check_fit(pool if pool is not None else snapshot.free_pool(), out)
    out.sort(key=_by_job_id)
    return out


def _by_job_id(action: JobAction) -> str:
    return action.job.job_id


def _known(job: JobView | None, job_id: str) -> JobView:
    if job is None:
        raise PlanError(f"plan runs unknown or finished job {job_id}")
    return job


def _check_placement(snapshot: Snapshot, job: JobView, target: Allocation) -> None:
    spec = job.spec
    if not spec.min_gpus <= target.num_gpus <= spec.max_gpus:
        raise PlanError(
            f"job {job.job_id} given {target.num_gpus} GPUs, "
            f"outside {spec.min_gpus}..{spec.max_gpus}"
        )
    sizes = snapshot.cluster.gpus_per_node  # each node's GPUs, cached on the cluster
    down = snapshot.down_nodes
    for node, gpu, _ in target.shares:
        if not 0 <= node < len(sizes) or not 0 <= gpu < sizes[node]:
            raise PlanError(f"job {job.job_id} placed on a missing GPU {node}/{gpu}")
        if down and node in down:
            raise PlanError(f"job {job.job_id} placed on a down node {node}")
    cordoned = new_gpu_on_cordoned(snapshot, job, target)
    if cordoned is not None:
        raise PlanError(f"job {job.job_id} given new GPUs on cordoned node {cordoned}")


def _check_fit(pool: GpuPool, actions: list[JobAction]) -> None:
    """PlanError at the first start that does not fit the pool once every stop has
    released its GPUs. The pool is left as it was."""
    if pool.tracks_host or not _check_whole_fit(pool, actions):
        _check_fit_by_trial(pool, actions)


def _check_whole_fit(pool: GpuPool, actions: list[JobAction]) -> bool:
    """The check when every allocation involved is of whole GPUs, without touching
    the pool: the simulator's common case, run every round. A start fits if
    each of its GPUs is wholly free, or held by a job that stops, and claimed once.
    False, having checked nothing, when an allocation involved holds a GPU share.

    A whole GPU's share (fraction 1) names the GPU, so the GPUs freed and claimed
    are sets of shares, filled and compared by set operations in C; a start on GPUs
    that stops freed (a time-slice swap: the very allocation a suspended job held)
    needs no look at the pool."""
    freed: set[GpuShare] = set()
    starts: list[JobAction] = []
    for a in actions:
        held = a.job.allocation
        alloc = a.allocation
        if (held is not None and held.shared) or (alloc is not None and alloc.shared):
            return False
        action = a.action
        if action in _ENDS_RUN:
            assert held is not None
            freed.update(held.shares)
        if action in _BEGINS_RUN:
            starts.append(a)
    claimed: set[GpuShare] = set()
    for a in starts:
        alloc = a.allocation
        assert alloc is not None
        shares = alloc.shares
        if not claimed.isdisjoint(shares) or not (
            freed.issuperset(shares) or _free_or_freed(pool, shares, freed)
        ):
            raise PlanError(f"job {a.job_id}: GPUs {alloc.gpus()} over-allocated")
        claimed.update(shares)
    return True


def _free_or_freed(pool: GpuPool, shares: tuple[GpuShare, ...], freed: set[GpuShare]) -> bool:
    """Whether each of these whole GPUs is freed by a stop, or wholly free in the pool."""
    shared = pool.shared_gpus()
    for s in shares:
        if s in freed:
            continue
        node, gpu, _ = s
        if gpu not in pool.free_gpus(node) or (shared and (node, gpu) in shared):
            return False
    return True


def _check_fit_by_trial(pool: GpuPool, actions: list[JobAction]) -> None:
    """Release what stops, take what starts, then put the pool back as it was."""
    released: list[JobAction] = []
    taken: list[JobAction] = []
    try:
        for a in (a for a in actions if a.stops):
            assert a.job.allocation is not None
            pool.release(a.job.allocation, a.job.spec.gpu_mem_mib)
            released.append(a)
        for a in (a for a in actions if a.starts):
            assert a.allocation is not None
            if not pool.fits(a.allocation, a.job.spec.gpu_mem_mib):
                raise PlanError(f"job {a.job_id}: {over_allocated(pool, a.allocation)}")
            pool.take(a.allocation, a.job.spec.gpu_mem_mib)
            taken.append(a)
    finally:
        for a in reversed(taken):
            assert a.allocation is not None
            pool.release(a.allocation, a.job.spec.gpu_mem_mib)
        for a in reversed(released):
            assert a.job.allocation is not None
            pool.take(a.job.allocation, a.job.spec.gpu_mem_mib)
