"""The GPU-choice filter: which nodes and GPUs a job may be given this round.

Kubernetes' scheduler framework runs a Filter stage before it scores nodes; this is
gpuflow's, asked where GPUs are chosen rather than after. A job may be given GPUs

- on a node that is up (a pool built from the snapshot holds no GPU of a down node);
- not on a cordoned node, unless it holds those GPUs already (it keeps them; the
  pool fences a cordoned node's free GPUs, controller.model.pool.GpuPool.cordon);
- on a node of a GPU model it accepts (`JobSpec.gpu_models`);
- on a node with the CPU and memory free for one of its pods (`JobSpec.host`, one
  pod per node it spans; Kubernetes' NodeResourcesFit), counted after the stops of
  the plan being built and the pods it has placed already.

How many more GPUs a job's quota leaf allows is the filter's other half,
controller.model.quotas.room (the round's figures carried by `Snapshot.quota_room`).

Callers: every placer through controller.placement.resources.ResourceAwarePlacer
(`fitting_pool`: the per-node rules), so every policy that places with
`Snapshot.placer`; the policies that search GPUs themselves (Tiresias'
consolidation, Optimus' and ElasticFlow's fewest servers, Gavel's rounds, Pollux's
GPU ids, Gandiva's swaps, packs and growth) through a `GpuFilter`, one per plan
(`pool_for`, `refusal`, `take`: both halves); every policy, placer-based ones too
(FIFO, SRTF, EDF), asks its `GpuFilter`'s quota half before it takes what the placer
chose (a placer is stateless across a plan, a queue's room is not); and, after the
policy, the controller's check of the plan against the same rules
(`plan_refusals`, called by controller.checks): a plan that breaks them is a
policy's defect, not something to repair.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from controller.model.allocation import Allocation
from controller.model.cluster import NO_HOST, UNCONSTRAINED, Cluster, HostRequest
from controller.model.job import JobSpec, JobView, Reason
from controller.model.pool import GpuPool
from controller.model.quotas.room import QuotaRoom, plan_quota_refusals
from controller.model.snapshot import Snapshot, new_gpu_on_cordoned

# Why a job waits for a node's CPU or memory: the operator's reason for the same
# (operators.pods, after placement), so replays and live clusters say it alike.
WAITING_FOR_RESOURCES = "WaitingForResources"
# Why a job waits that was planned onto a cordoned node (Kubernetes' word for it).
NODE_CORDONED = "NodeCordoned"
# Why a job waits that was planned onto a node of a GPU model it refuses.
GPU_MODEL_REFUSED = "GpuModelRefused"


def refused_nodes(cluster: Cluster, gpu_models: frozenset[str]) -> tuple[int, ...]:
    """Nodes whose GPU model is not among `gpu_models` (none when it is empty)."""
    if not gpu_models:
        return ()
    return tuple(i for i, n in enumerate(cluster.nodes) if n.gpu_type.name not in gpu_models)


def fitting_pool(pool: GpuPool, spec: JobSpec, refused: Collection[int] = ()) -> GpuPool:
    """`pool`, or a copy of it with the nodes that offer GPUs but cannot take the job
    cordoned: of a `refused` GPU model, or short of CPU or memory for one of its
    pods. Their free GPUs are out of reach, the job's own (if it runs there) still
    takeable by name. Nodes that offer nothing need no fence."""
    if (spec.host == NO_HOST or not pool.tracks_host) and not refused:
        return pool
    shared_on = {node for node, _ in pool.shared_gpus()}
    offering = [n for n in range(pool.num_nodes) if pool.free_gpus(n) or n in shared_on]
    refused_set = set(refused)
    fenced = [n for n in offering if n in refused_set or not pool.host_fits(n, spec.host)]
    if not fenced:
        return pool
    view = pool.copy()
    for node in fenced:
        view.cordon(node)
    return view


def pool_for(snapshot: Snapshot, pool: GpuPool, spec: JobSpec) -> GpuPool:
    """What a policy's own search may choose from for a job: `pool` (taken from the
    snapshot: no down node, cordoned nodes fenced) over the nodes the job's pods fit."""
    if spec.host == NO_HOST and not spec.gpu_models:
        return pool  # most jobs: no copy, no walk over the nodes
    return fitting_pool(pool, spec, refused_nodes(snapshot.cluster, spec.gpu_models))


def refusal(snapshot: Snapshot, pool: GpuPool, job: JobView, alloc: Allocation) -> Reason | None:
    """Why `alloc` may not be given to `job` from `pool` (the plan's free capacity so
    far, the job's own GPUs released into it), or None: a GPU it does not hold on a
    cordoned node, a node of a GPU model it refuses, a node without the CPU or memory
    for one of its pods. Whether the GPUs themselves are free is the pool's `fits`."""
    node = new_gpu_on_cordoned(snapshot, job, alloc)
    if node is not None:
        name = snapshot.cluster.nodes[node].name
        return Reason(NODE_CORDONED, f"node {name} is cordoned: no new work")
    spec = job.spec
    if spec.gpu_models:
        for node in alloc.nodes:
            model = snapshot.cluster.nodes[node].gpu_type.name
            if not spec.accepts(model):
                name = snapshot.cluster.nodes[node].name
                return Reason(GPU_MODEL_REFUSED, f"node {name} has {model} GPUs, not accepted")
    host = spec.host
    if host != NO_HOST and pool.tracks_host:
        for node in alloc.nodes:
            if not pool.host_fits(node, host):
                return Reason(WAITING_FOR_RESOURCES, shortfall(snapshot, pool, node, host))
    return None


def take(pool: GpuPool, job: JobView, alloc: Allocation) -> Allocation:
    """Take `alloc` for `job` from `pool`, its pods' CPU and memory included, and
    return it as the plan holds it (with the job's request: controller.actions
    counts it on each node)."""
    alloc = alloc.with_host(job.spec.host)
    pool.take(alloc, job.spec.gpu_mem_mib)
    return alloc


class GpuFilter:
    """One plan's filter, for a policy: made from the snapshot it is shown, asked job
    by job where the policy chooses (`pool_for`, `refusal`, `quota_refusal`),
    told what it gives (`take`) and takes back (`release`, undone by `keep`), so
    that with quotas the GPUs one job is given lower its queue's room for the next
    (controller.model.quotas.room.QuotaUse)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        room, current = snapshot.quota_room, snapshot.current
        self.quota = None if room is None or current is None else room.start(current)

    def pool_for(self, pool: GpuPool, spec: JobSpec) -> GpuPool:
        """The part of `pool` the job's pods fit (module `pool_for`)."""
        return pool_for(self.snapshot, pool, spec)

    def refusal(self, pool: GpuPool, job: JobView, alloc: Allocation) -> Reason | None:
        """Why `alloc` may not be given to `job` (module `refusal`), or why its queue
        does not allow the GPUs beyond those it holds; None when it may."""
        why = refusal(self.snapshot, pool, job, alloc)
        return why if why is not None else self.quota_refusal(job, alloc)

    def quota_refusal(self, job: JobView, alloc: Allocation) -> Reason | None:
        """Why the job's queue does not allow `alloc`'s GPUs beyond those it holds."""
        return None if self.quota is None else self.quota.refusal(job, alloc)

    def take(self, pool: GpuPool, job: JobView, alloc: Allocation) -> Allocation:
        """Take `alloc` for `job` from `pool` (module `take`) and from its queue's room;
        the allocation as the plan holds it."""
        alloc = take(pool, job, alloc)
        self.grant(job, alloc)
        return alloc

    def grant(self, job: JobView, alloc: Allocation) -> None:
        """`alloc` is the job's now (taken from a pool by the caller): its queue's room
        falls by what it adds, and grows by what it gives back."""
        if self.quota is not None:
            self.quota.grant(job, alloc)
            self.quota.release(job.job_id, alloc)

    def release(self, job: JobView) -> None:
        """`job`, running, is stopped by the plan: its queue may use its GPUs again."""
        if self.quota is not None:
            self.quota.release(job.job_id, None)

    def keep(self, job: JobView) -> bool:
        """Take back `release(job)`: the job keeps its GPUs after all. False (it stays
        stopped) when what its queue was granted since needs them."""
        return self.quota is None or self.quota.keep(job.job_id)


def plan_refusals(
    snapshot: Snapshot,
    run: Mapping[str, Allocation],
    changed: Iterable[str],
    stopped: Iterable[str],
    quota: QuotaRoom | None = None,
) -> dict[str, Reason]:
    """The jobs among `changed` (started, resized or moved by a plan whose `run` is
    given; `stopped`: the running jobs it stops) that the filter refuses, each with
    its reason, counted after the plan's stops in job id order (compile_plan's
    order); then, with `quota`, the others' gains beyond what their queues allow
    (controller.model.quotas.room.plan_quota_refusals). A plan whose GPUs are
    over-allocated is left to compile_plan to refuse."""
    changed = sorted(changed)
    if not changed:
        return {}
    refused = _node_refusals(snapshot, run, changed, stopped)
    if quota is not None:
        assert snapshot.current is not None
        rest = {k: v for k, v in run.items() if k not in refused}
        refused.update(plan_quota_refusals(quota, snapshot.job, snapshot.current, rest))
    return refused


def _node_refusals(
    snapshot: Snapshot, run: Mapping[str, Allocation], changed: list[str], stopped: Iterable[str]
) -> dict[str, Reason]:
    if not snapshot.cordoned_nodes and not _tracks_host(snapshot):
        models = (snapshot.job(j) for j in changed)
        if not any(job is not None and job.spec.gpu_models for job in models):
            return {}  # nothing to refuse: most rounds of most replays, without a copy
    pool = snapshot.free_pool()
    for job_id in (*stopped, *changed):
        job = snapshot.job(job_id)
        if job is not None and job.allocation is not None:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
    refused: dict[str, Reason] = {}
    for job_id in changed:
        job = snapshot.job(job_id)
        if job is None:
            continue  # compile_plan names the unknown job
        alloc = run[job_id].with_host(job.spec.host)
        why = refusal(snapshot, pool, job, alloc)
        if why is not None:
            refused[job_id] = why
        elif pool.fits(alloc, job.spec.gpu_mem_mib):
            pool.take(alloc, job.spec.gpu_mem_mib)
    return refused


def shortfall(snapshot: Snapshot, pool: GpuPool, node: int, host: HostRequest) -> str:
    """What the node lacks for one more pod asking `host`, as the operator says it
    (operators.dljobs.requests.shortfall): "node-1: needs 8 CPU, 6 allocatable free"."""
    free = pool.host_free(node) or HostRequest(UNCONSTRAINED, UNCONSTRAINED)
    name = snapshot.cluster.nodes[node].name
    if host.cpu_milli > free.cpu_milli:
        have = max(0, free.cpu_milli) / 1000
        return f"{name}: needs {host.cpu_milli / 1000:g} CPU, {have:g} allocatable free"
    have_mib = max(0, free.mem_mib)
    return f"{name}: needs {host.mem_mib} MiB memory, {have_mib} MiB allocatable free"


def gpu_takers(run: Mapping[str, Allocation]) -> dict[tuple[int, int], set[str]]:
    """Each GPU of a plan -> the jobs given a share of it."""
    taken: dict[tuple[int, int], set[str]] = {}
    for job_id, alloc in run.items():
        for gpu in alloc.gpus():
            taken.setdefault(gpu, set()).add(job_id)
    return taken


def _tracks_host(snapshot: Snapshot) -> bool:
    """Whether some node states its CPU or memory (the backend's pool says so)."""
    if snapshot.pool is not None:
        return snapshot.pool.tracks_host
    return any(node.host is not None for node in snapshot.cluster.nodes)
