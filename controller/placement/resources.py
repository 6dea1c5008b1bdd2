"""CPU, host memory and GPU model for every replay placer: the nodes a job's pods fit.

`make_placer` wraps each placer of `PLACERS` in `ResourceAwarePlacer`, so policies
(through `Snapshot.placer`), the simulator and the operator place with it. A job that
asks for CPU or host memory (`JobSpec.host`, per worker pod, one pod per node it
spans) on a cluster whose nodes state theirs, or that names GPU models, is placed on
a copy of the pool in which every node that cannot hold one of its pods is cordoned:
short of CPU or memory now (`GpuPool.host_fits`, Kubernetes' NodeResourcesFit), or
of a GPU model the job refuses. Each placer's own search (buckets, racks, subsets,
fragmentation) then runs unchanged over the nodes that fit, and a gang never has a
node its pod cannot start on. The allocation returned carries the job's request
(`Allocation.host`), which `GpuPool.take` counts on each of its nodes.

A job that asks none of these goes straight to the placer: replays of traces without
them place exactly as before, at no cost. Before either, the wrapper applies the rule
every placer shares, once for all of them: a running job that keeps its size keeps its
GPUs (or GPU shares) where they are still free to it (`sticky_allocation`).

`host_never_fits` is the rule both backends apply before a job reaches a policy: the
simulator records a job whose pod no node could ever hold as never run, and the
operator marks it Unschedulable. `fence_resources`, called by
`controller.maintenance.fence_plan` between the policy and the backend, holds back
the starts of a policy that chooses GPUs itself (Tiresias', Optimus', Pollux' and
Gandiva's own searches read GPUs only) where a pod's CPU or memory would not fit: the
job waits, or stops, with a reason naming the node, instead of the plan failing; and
a job held back by CPU or memory alone says so (WaitingForResources), not the
policy's reason, which speaks of GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from controller.actions import plan_diff
from controller.model import (
    NO_HOST,
    Allocation,
    Cluster,
    GpuPool,
    HostRequest,
    JobSpec,
    JobView,
    Placer,
    Plan,
    Reason,
    Snapshot,
)
from controller.model.cluster import UNCONSTRAINED
from controller.placement.basic import sticky_allocation

# Why a job waits for a node's CPU or memory: the operator's reason for the same
# (operators.pods, after placement), so replays and live clusters say it alike.
WAITING_FOR_RESOURCES = "WaitingForResources"


class ResourceAwarePlacer:
    """`inner` over the nodes that can hold one of the job's pods (module docstring)."""

    def __init__(self, inner: Placer, cluster: Cluster) -> None:
        self.inner = inner
        self.cluster = cluster
        self._refused: dict[frozenset[str], tuple[int, ...]] = {}

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        spec = job.spec
        host = spec.host
        plain = (host == NO_HOST or not pool.tracks_host) and not spec.gpu_models
        # The one place of the rule every placer keeps: a running job that keeps its
        # size keeps its GPUs (or GPU shares) where they are still free to it, a job
        # released from a cordoned node included (its own GPUs are takeable by name).
        kept = sticky_allocation(pool, job, num_gpus)
        if kept is not None:
            return kept if plain else kept.with_host(host)
        if plain:
            return self.inner.place(pool, job, num_gpus)
        alloc = self.inner.place(self.fitting_pool(pool, spec), job, num_gpus)
        return None if alloc is None else alloc.with_host(host)

    def fitting_pool(self, pool: GpuPool, spec: JobSpec) -> GpuPool:
        """`pool`, or a copy of it with the nodes that offer GPUs but cannot hold one
        of the job's pods cordoned: their free GPUs out of reach, the job's own (if it
        runs there) still takeable by name. Nodes that offer nothing need no fence."""
        shared_on = {node for node, _ in pool.shared_gpus()}
        offering = [n for n in range(pool.num_nodes) if pool.free_gpus(n) or n in shared_on]
        refused = set(self.refused_nodes(spec.gpu_models))
        fenced = [n for n in offering if n in refused or not pool.host_fits(n, spec.host)]
        if not fenced:
            return pool
        view = pool.copy()
        for node in fenced:
            view.cordon(node)
        return view

    def refused_nodes(self, gpu_models: frozenset[str]) -> tuple[int, ...]:
        """Nodes whose GPU model is not among `gpu_models` (none when it is empty)."""
        if not gpu_models:
            return ()
        hit = self._refused.get(gpu_models)
        if hit is None:
            hit = tuple(
                i for i, n in enumerate(self.cluster.nodes) if n.gpu_type.name not in gpu_models
            )
            self._refused[gpu_models] = hit
        return hit


def host_never_fits(spec: JobSpec, cluster: Cluster) -> str | None:
    """Why no node of the cluster, down ones included, could ever hold one of the job's
    pods for CPU, host memory or GPU model, even with nothing else on it; None when
    some could."""
    if not spec.gpu_models and spec.host == NO_HOST and cluster.nodes:
        return None  # most jobs: asked at each arrival, so without a walk over the nodes
    models = [n for n in cluster.nodes if spec.accepts(n.gpu_type.name)]
    if not models:
        wanted = ", ".join(sorted(spec.gpu_models))
        return f"accepts GPU models {wanted}; the cluster has none of them"
    host = spec.host
    if host == NO_HOST:
        return None
    for node in models:
        cap = node.host
        if cap is None or (host.cpu_milli <= cap.cpu_milli and host.mem_mib <= cap.mem_mib):
            return None
    return (
        f"a worker pod needs {host.cpu_milli / 1000:g} CPU and {host.mem_mib} MiB of "
        f"memory; no node has that much allocatable"
    )


def fence_resources(snapshot: Snapshot, plan: Plan) -> Plan:
    """`plan` without the starts whose pods' CPU or memory do not fit their nodes,
    counted after the plan's stops, in job id order (compile_plan's order): such a job
    waits, or stops if it runs. A plan whose GPUs do not fit is left for compile_plan
    to refuse. A waiting job whose GPUs some node has free, but no such node its pod's
    CPU or memory, says so instead of the policy's reason (which speaks of GPUs).
    Unchanged when no node states its CPU or memory."""
    if snapshot.current is None or (snapshot.pool is not None and not snapshot.pool.tracks_host):
        return plan  # without copying the pool, as most replays' every round
    pool = snapshot.free_pool()
    if not pool.tracks_host:
        return plan
    changed, stopped = plan_diff(plan.run, snapshot.current)
    for job_id in (*stopped, *changed):
        job = snapshot.job(job_id)
        if job is not None and job.allocation is not None:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
    refused: dict[str, Reason] = {}
    for job_id in changed:
        job = snapshot.job(job_id)
        if job is None:
            continue  # compile_plan names the unknown job
        alloc = plan.run[job_id].with_host(job.spec.host)
        if pool.fits(alloc, job.spec.gpu_mem_mib):
            pool.take(alloc, job.spec.gpu_mem_mib)
        elif pool.fits(alloc.with_host(NO_HOST), job.spec.gpu_mem_mib):
            short = next(n for n in alloc.nodes if not pool.host_fits(n, alloc.host))
            refused[job_id] = Reason(
                WAITING_FOR_RESOURCES, shortfall(snapshot, pool, short, alloc.host)
            )
    run = {k: v for k, v in plan.run.items() if k not in refused}
    held = _held_by_host(snapshot, pool, run)
    if not refused and not held:
        return plan
    return replace(plan, run=run, reasons={**plan.reasons, **held, **refused})


def _held_by_host(
    snapshot: Snapshot, pool: GpuPool, run: Mapping[str, Allocation]
) -> dict[str, Reason]:
    """Waiting jobs (pods asking CPU or memory) for which some node of an accepted GPU
    model has the GPUs free but none of those the pod's CPU or memory: why they wait."""
    out: dict[str, Reason] = {}
    seen: dict[tuple[int, HostRequest, frozenset[str]], str | None] = {}
    for job in snapshot.waiting():
        spec = job.spec
        if spec.host == NO_HOST or job.job_id in run:
            continue
        key = (spec.min_gpus, spec.host, spec.gpu_models)
        if key not in seen:
            roomy = [
                n
                for n in range(pool.num_nodes)
                if len(pool.free_gpus(n)) >= spec.min_gpus
                and spec.accepts(snapshot.cluster.nodes[n].gpu_type.name)
            ]
            seen[key] = None
            if roomy and not any(pool.host_fits(n, spec.host) for n in roomy):
                node = max(roomy, key=lambda n: _free_cpu(pool, n))
                seen[key] = shortfall(snapshot, pool, node, spec.host)
        why = seen[key]
        if why is not None:
            out[job.job_id] = Reason(WAITING_FOR_RESOURCES, why)
    return out


def _free_cpu(pool: GpuPool, node: int) -> int:
    free = pool.host_free(node)
    return 0 if free is None else free.cpu_milli


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
