"""Snapshot in, plan out: the contract between a backend's controller and a policy.

A backend (the simulator or Kubernetes) builds a `Snapshot` each scheduling round;
the policy returns a `Plan` saying which jobs run on which GPUs afterwards and why
every other job waits; the controller validates the plan and applies it, gang by
gang. Policies are pure: cross-round memory travels as `Plan.state` and comes back
as the `state` argument of the next call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from controller.model.allocation import Allocation
from controller.model.cluster import Cluster
from controller.model.job import WAITING, JobSpec, JobStatus, JobView, Reason
from controller.model.pool import GpuPool
from controller.model.quotas import QuotaTree
from controller.model.quotas.room import QuotaRoom
from controller.model.waiting import WaitingIndex, WaitingKey


class Placer(Protocol):
    """Turns "this job, n GPUs" into a GPU set taken from a pool (controller/placement)."""

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        """A placement for `job` on `num_gpus` GPUs that fits `pool`, or None.

        Does not modify the pool. Prefers the job's current GPUs where they fit.
        """
        ...


class TypeRates(Protocol):
    """A job's speed on each GPU type, for policies that choose a type (Gavel's): the
    backend's own speeds (controller.rates.RateModel in a replay)."""

    def type_rate_ips(self, spec: JobSpec, gpu: str, num_gpus: int) -> float | None:
        """Steps per second of `spec` on `num_gpus` GPUs of type `gpu` (a GpuType name)
        placed as well as the cluster allows, or None where the type has too few."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """The immutable state one scheduling decision sees."""

    now_s: float
    cluster: Cluster
    jobs: tuple[JobView, ...]  # active jobs: queued, running, preempted, suspended
    placer: Placer
    down_nodes: frozenset[int] = frozenset()
    # Nodes that take no new GPUs (an admin's cordon or drain); their jobs run on.
    cordoned_nodes: frozenset[int] = frozenset()
    # The backend may hand over the free capacity it keeps; it is never mutated here.
    pool: GpuPool | None = field(default=None, repr=False, compare=False)
    # `jobs` split by state; derived when the backend does not give them.
    running_jobs: tuple[JobView, ...] | None = field(default=None, repr=False, compare=False)
    waiting_jobs: tuple[JobView, ...] | None = field(default=None, repr=False, compare=False)
    # job id -> allocation of every running job; derived when not given.
    current: Mapping[str, Allocation] | None = field(default=None, repr=False, compare=False)
    # job id -> view of every active job; derived on first use when not given.
    index: Mapping[str, JobView] | None = field(default=None, repr=False, compare=False)
    # The backend's waiting jobs kept in order between rounds (controller.model.waiting);
    # None: `waiting_in_order` and `waiting_by_size` sort `waiting_jobs` instead.
    ordered: WaitingIndex | None = field(default=None, repr=False, compare=False)
    # Each job's speed on each GPU type (Gavel's policies); None: the backend gives none,
    # and a policy that needs it asks the performance model (controller.model.perf.matrix).
    type_rates: TypeRates | None = field(default=None, repr=False, compare=False)
    # The quota tree where the controller runs quotas (controller.quotas.admission sets
    # it on the snapshot a policy is shown): a policy that promises GPUs ahead (a
    # deadline's share) reads each queue's guarantee from it. None: no quotas.
    queues: QuotaTree | None = field(default=None, repr=False, compare=False)
    # The round's quota figures the policy is shown with the tree (set with it): the
    # quota half of the GPU-choice filter (controller.model.quotas.room), asked by a
    # policy that gives a job more than its smallest size. None: no quotas.
    quota_room: QuotaRoom | None = field(default=None, repr=False, compare=False)

    def with_placer(self, placer: Placer) -> Snapshot:
        """This snapshot with another placer (controller.model.gpu_choice.gpu_type.type_placer),
        sharing what it has built (a deferred snapshot's waiting jobs are still built
        only when read)."""
        if placer is self.placer:
            return self
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        object.__setattr__(copy, "placer", placer)
        return copy

    def job(self, job_id: str) -> JobView | None:
        """The active job with this id, or None."""
        if self.index is None:
            object.__setattr__(self, "index", {j.job_id: j for j in self.jobs})
            assert self.index is not None
        return self.index.get(job_id)

    @classmethod
    def deferred(
        cls, waiting: Callable[[], tuple[JobView, ...]], num_waiting: int, **given: Any
    ) -> Snapshot:
        """A snapshot whose waiting jobs, and so `jobs`, are built from `waiting()`
        only when first read; `given` holds every other field (`running_jobs`,
        `current` and `index` included). A backend that keeps its queue ordered
        (`ordered`) thus spares a policy that reads only the head of the queue a
        tuple of every waiting job each round; `num_waiting` is the queue's length."""
        snapshot = cls.__new__(cls)
        for name, default in _DEFERRED_FIELDS:
            object.__setattr__(snapshot, name, given.get(name, default))
        assert snapshot.running_jobs is not None and snapshot.current is not None
        object.__setattr__(snapshot, "_waiting_source", waiting)
        object.__setattr__(snapshot, "_num_waiting", num_waiting)
        return snapshot

    if not TYPE_CHECKING:  # mypy keeps checking every other attribute's name

        def __getattr__(self, name: str) -> Any:
            """`jobs` of a deferred snapshot, built on first use (attributes that
            are set never come here)."""
            if name == "jobs" and "_waiting_source" in self.__dict__:
                jobs = self.running() + self.waiting()
                object.__setattr__(self, "jobs", jobs)
                return jobs
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __post_init__(self) -> None:
        if self.running_jobs is None or self.waiting_jobs is None:
            running = tuple(j for j in self.jobs if j.status is JobStatus.RUNNING)
            waiting = tuple(j for j in self.jobs if j.status in WAITING)
            object.__setattr__(self, "running_jobs", running)
            object.__setattr__(self, "waiting_jobs", waiting)
        if self.current is None:
            current = {j.job_id: j.allocation for j in self.running() if j.allocation}
            object.__setattr__(self, "current", current)

    def free_gpu_count(self) -> int:
        """Whole GPUs free on nodes that are up (no copy of the pool)."""
        return self._free().total_free

    def free_gpu_set(self) -> frozenset[tuple[int, int]]:
        """The whole GPUs free, as (node, gpu), where a policy may place (no copy of
        the pool): what controller/pace.py compares between rounds."""
        pool = self._free()
        return frozenset((n, g) for n in range(pool.num_nodes) for g in pool.free_gpus(n))

    def allocations(self) -> dict[str, Allocation]:
        """A fresh dict of the running jobs' allocations: the "keep everything" plan
        that a policy edits. It notes which jobs were edited, so that a backend can
        apply it in time proportional to the edits."""
        assert self.current is not None
        return EditedAllocations(self.current)

    def free_pool(self) -> GpuPool:
        """A fresh scratch copy of the capacity not held by running jobs."""
        return self._free().copy()

    def _free(self) -> GpuPool:
        """The capacity not held by running jobs, built once per snapshot; callers
        read it and never change it (free_pool hands out copies to change)."""
        if self.pool is None:
            pool = GpuPool.of_cluster(self.cluster, self.down_nodes, self.cordoned_nodes)
            for job in self.running():
                if job.allocation is not None:
                    pool.take(job.allocation, job.spec.gpu_mem_mib)
            object.__setattr__(self, "pool", pool)
            assert self.pool is not None
        return self.pool

    def running(self) -> tuple[JobView, ...]:
        assert self.running_jobs is not None
        return self.running_jobs

    def usable_gpus(self) -> list[int]:
        """How many GPUs a plan may give out on each node: none on a down node, and on
        a cordoned one only those its running jobs hold (they keep them; no job gets a
        new one there). For policies that size jobs from counts (Pollux, Optimus)."""
        down, cordoned = self.down_nodes, self.cordoned_nodes
        held = [0] * len(self.cluster.nodes)
        if cordoned:
            for job in self.running():
                for node, count in job.allocation.per_node if job.allocation else ():
                    held[node] += count
        return [
            0 if i in down else held[i] if i in cordoned else node.num_gpus
            for i, node in enumerate(self.cluster.nodes)
        ]

    def waiting(self) -> tuple[JobView, ...]:
        if self.waiting_jobs is None:  # a deferred snapshot's, read for the first time
            object.__setattr__(self, "waiting_jobs", self.__dict__["_waiting_source"]())
            assert self.waiting_jobs is not None
        return self.waiting_jobs

    def waiting_count(self) -> int:
        """How many jobs wait (without building a deferred snapshot's tuple)."""
        if self.waiting_jobs is None:
            count: int = self.__dict__["_num_waiting"]
            return count
        return len(self.waiting_jobs)

    def waiting_in_order(self, key: WaitingKey) -> Iterator[JobView]:
        """The waiting jobs by `key` (constant while a job waits, unique), lazily: a
        policy that stops early reads only the head of an ordered backend's queue."""
        if self.ordered is not None:
            return self.ordered.in_order(key)
        return iter(sorted(self.waiting(), key=key))

    def waiting_by_size(self, key: WaitingKey) -> Mapping[int, Iterator[JobView]]:
        """The waiting jobs by the GPUs they ask for, each size's by `key`, lazily."""
        if self.ordered is not None:
            return self.ordered.by_size(key)
        groups: dict[int, list[JobView]] = {}
        for job in sorted(self.waiting(), key=key):
            groups.setdefault(job.spec.num_gpus, []).append(job)
        return {n: iter(jobs) for n, jobs in groups.items()}

    def waiting_changes(self, mark: int | None) -> tuple[int | None, Sequence[str] | None]:
        """The backend's change mark now, and the ids of the jobs whose waiting view
        came, went or changed since `mark` (`WaitingIndex.changes_since`); (None, None)
        when the backend keeps no such record: read every waiting job."""
        if self.ordered is None:
            return None, None
        return self.ordered.changes_since(mark)

    def waiting_gpus_asked(self) -> int:
        """The GPUs all waiting jobs ask for together."""
        if self.ordered is not None:
            return self.ordered.gpus_asked()
        return sum(j.spec.num_gpus for j in self.waiting())


# (name, default) of every field `Snapshot.deferred` sets: all but the waiting jobs
# and `jobs` (a backend makes one deferred snapshot a round).
_DEFERRED_FIELDS = tuple(
    (f.name, f.default) for f in fields(Snapshot) if f.name not in ("jobs", "waiting_jobs")
)


class EditedAllocations(dict[str, Allocation]):
    """A copy of `origin` that records every key written or removed in `edited`."""

    def __init__(self, origin: Mapping[str, Allocation]) -> None:
        super().__init__(origin)
        self.origin = origin
        self.edited: set[str] = set()

    def __setitem__(self, key: str, value: Allocation) -> None:
        self.edited.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.edited.add(key)
        super().__delitem__(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.edited.add(key)
        return super().pop(key, *default)

    def setdefault(self, key: str, default: Allocation | None = None) -> Any:
        self.edited.add(key)
        return super().setdefault(key, default)  # type: ignore[arg-type]

    def update(self, *args: Any, **kwargs: Allocation) -> None:
        other = dict(*args, **kwargs)
        self.edited.update(other)
        super().update(other)

    def popitem(self) -> tuple[str, Allocation]:
        key, value = super().popitem()
        self.edited.add(key)
        return key, value

    def clear(self) -> None:
        self.edited.update(self)
        super().clear()

    def __ior__(self, other: Any) -> EditedAllocations:  # type: ignore[override,misc]
        self.update(other)
        return self


class Action(Enum):
    """What applying a plan does to one job: the vocabulary both backends carry out."""

    START = "start"  # queued or preempted -> running (a preempted job from its checkpoint)
    RESUME = "resume"  # suspended -> running
    KEEP = "keep"
    REBATCH = "rebatch"  # same GPUs and shares, another batch size: no restart
    RESIZE = "resize"  # more or fewer GPUs (a restart)
    MIGRATE = "migrate"  # same count, other GPUs (a restart)
    # Same GPUs, other shares: a restart, because an MPS client's thread percentage and
    # memory limit are fixed when its process starts.
    RESHARE = "reshare"
    PREEMPT = "preempt"  # running -> preempted (checkpoint, restart later)
    SUSPEND = "suspend"  # running -> suspended (time-sliced out)


# Actions that stop a running job for good, and those that stop and start it again.
STOPPING = frozenset({Action.PREEMPT, Action.SUSPEND})
RESTARTING = frozenset({Action.RESIZE, Action.MIGRATE, Action.RESHARE})


def classify_change(
    job: JobView, target: Allocation | None, batch_size: int | None, suspend: bool
) -> Action | None:
    """The action that takes `job` to `target` (None: stays waiting) with `batch_size`
    (None: unchanged). The one definition both backends and `Plan.actions` use."""
    current = job.allocation
    if job.status is not JobStatus.RUNNING or current is None:
        if target is None:
            return None
        return Action.RESUME if job.status is JobStatus.SUSPENDED else Action.START
    if target is None:
        return Action.SUSPEND if suspend else Action.PREEMPT
    if target == current:
        if batch_size is not None and batch_size != job.batch_size:
            return Action.REBATCH
        return Action.KEEP
    if target.num_gpus != current.num_gpus:
        return Action.RESIZE
    if target.gpus() == current.gpus():
        return Action.RESHARE
    return Action.MIGRATE


@dataclass(frozen=True)
class Plan:
    """The world after this round.

    `run` maps every job that runs afterwards to its allocation: a running job left
    out is stopped (suspended if in `suspend`, preempted otherwise). Every waiting
    job afterwards has a reason: its own in `reasons`, or `default_reason`.
    """

    run: Mapping[str, Allocation]
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    default_reason: Reason | None = None
    suspend: frozenset[str] = frozenset()
    batch_sizes: Mapping[str, int] = field(default_factory=dict)
    state: Any = None
    wake_s: float | None = None  # decide again by then even if nothing happens

    def reason_for(self, job_id: str) -> Reason | None:
        return self.reasons.get(job_id, self.default_reason)

    def actions(self, snapshot: Snapshot) -> dict[str, Action]:
        """What applying this plan does to each job whose state changes or is kept."""
        out: dict[str, Action] = {}
        for job in snapshot.jobs:
            target = self.run.get(job.job_id)
            batch = self.batch_sizes.get(job.job_id)
            action = classify_change(job, target, batch, job.job_id in self.suspend)
            if action is not None:
                out[job.job_id] = action
        return out


class Policy(Protocol):
    """A scheduling policy: pure, registered by name in `policies.registry`."""

    @property
    def name(self) -> str: ...

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        """Decide the round. `state` is the previous plan's `state` (None at first)."""
        ...


def new_gpu_on_cordoned(snapshot: Snapshot, job: JobView, target: Allocation) -> int | None:
    """A cordoned node on which `target` gives `job` a GPU it does not hold now (a
    running job keeps, re-shares or shrinks onto what it holds), or None."""
    cordoned = snapshot.cordoned_nodes
    if not cordoned:
        return None
    held: set[tuple[int, int]] = set()
    if job.status is JobStatus.RUNNING and job.allocation is not None:
        held = set(job.allocation.gpus())
    for share in target.shares:
        if share.node in cordoned and (share.node, share.gpu) not in held:
            return share.node
    return None


class PlanError(ValueError):
    """A plan that breaks the rules (over-allocation, a partial gang, a bad size)."""


def validate_plan(snapshot: Snapshot, plan: Plan) -> None:
    """Check a plan against the snapshot; raises PlanError naming the first fault.

    The invariants every policy must keep: no GPU over-allocated (shares of a GPU
    add up to at most 1 and fit its memory), every gang placed whole within its
    min..max size, no job on a down node, no new GPU on a cordoned node (a running
    job keeps the GPUs it holds there), no unknown job, and a reason for every job
    left waiting.
    """
    by_id = {j.job_id: j for j in snapshot.jobs}
    pool = GpuPool.of_cluster(snapshot.cluster, snapshot.down_nodes)
    for job_id in sorted(plan.run):
        alloc = plan.run[job_id]
        job = by_id.get(job_id)
        if job is None:
            raise PlanError(f"plan runs unknown or finished job {job_id}")
        spec = job.spec
        if not spec.min_gpus <= alloc.num_gpus <= spec.max_gpus:
            raise PlanError(
                f"job {job_id}: {alloc.num_gpus} GPUs outside {spec.min_gpus}..{spec.max_gpus}"
            )
        for share in alloc.shares:
            if not 0 <= share.node < len(snapshot.cluster.nodes):
                raise PlanError(f"job {job_id}: no node {share.node}")
            if not 0 <= share.gpu < snapshot.cluster.nodes[share.node].num_gpus:
                raise PlanError(f"job {job_id}: no GPU {share.gpu} on node {share.node}")
            if share.node in snapshot.down_nodes:
                raise PlanError(f"job {job_id}: node {share.node} is down")
        new_on = new_gpu_on_cordoned(snapshot, job, alloc)
        if new_on is not None:
            raise PlanError(f"job {job_id}: new GPUs on cordoned node {new_on}")
        alloc = alloc.with_host(spec.host)
        if not pool.fits(alloc, spec.gpu_mem_mib):
            raise PlanError(f"job {job_id}: {over_allocated(pool, alloc)}")
        pool.take(alloc, spec.gpu_mem_mib)
    for job in snapshot.jobs:
        if job.job_id not in plan.run and plan.reason_for(job.job_id) is None:
            raise PlanError(f"job {job.job_id} waits without a reason")


def over_allocated(pool: GpuPool, alloc: Allocation) -> str:
    """Why `alloc` does not fit `pool`: the first node short of CPU or host memory
    for the job's pod, else its GPUs."""
    for node in alloc.nodes:
        if not pool.host_fits(node, alloc.host):
            free = pool.host_free(node)
            assert free is not None
            return (
                f"node {node} has {free.cpu_milli} milli-CPU and {free.mem_mib} MiB free, "
                f"its pod asks {alloc.host.cpu_milli} and {alloc.host.mem_mib}"
            )
    return f"GPUs {alloc.gpus()} over-allocated"
