"""CPU, host memory and GPU model for every replay placer: the nodes a job's pods fit.

`make_placer` wraps each placer of `PLACERS` in `ResourceAwarePlacer`, so policies
(through `Snapshot.placer`), the simulator and the operator place with it. A job that
asks for CPU or host memory (`JobSpec.host`, per worker pod, one pod per node it
spans) on a cluster whose nodes state theirs, or that names GPU models, is placed on
the pool the GPU-choice filter leaves it (controller.model.gpu_choice.candidates.fitting_pool):
a copy in which every node that cannot hold one of its pods is cordoned, short of
CPU or memory now (`GpuPool.host_fits`, Kubernetes' NodeResourcesFit), or of a GPU
model the job refuses. Each placer's own search (buckets, racks, subsets,
fragmentation) then runs unchanged over the nodes that fit, and a gang never has a
node its pod cannot start on. The allocation returned carries the job's request
(`Allocation.host`), which `GpuPool.take` counts on each of its nodes.

A job that asks none of these goes straight to the placer: replays of traces without
them place exactly as before, at no cost. Before either, the wrapper applies the rule
every placer shares, once for all of them: a running job that keeps its size keeps its
GPUs (or GPU shares) where they are still free to it (`sticky_allocation`).

`host_never_fits` is the rule both backends apply before a job reaches a policy: the
simulator records a job whose pod no node could ever hold as never run, and the
operator marks it Unschedulable. After the policy, controller.checks checks the plan
against the same filter.
"""

from __future__ import annotations

from controller.model import NO_HOST, Allocation, Cluster, GpuPool, JobSpec, JobView, Placer
from controller.model.gpu_choice.candidates import fitting_pool, refused_nodes
from controller.placement.basic import sticky_allocation


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
        """The pool the GPU-choice filter leaves the job (module docstring)."""
        return fitting_pool(pool, spec, self.refused_nodes(spec.gpu_models))

    def refused_nodes(self, gpu_models: frozenset[str]) -> tuple[int, ...]:
        """Nodes whose GPU model is not among `gpu_models`, kept per set of models."""
        if not gpu_models:
            return ()
        hit = self._refused.get(gpu_models)
        if hit is None:
            hit = refused_nodes(self.cluster, gpu_models)
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
