"""Placement by GPU type: a job goes to the type that runs it fastest, among those
with room for its gang (issue 31, item 3).

`FastestTypePlacer` wraps any placer: for a job on n GPUs it ranks the cluster's GPU
types by the job's steps per second on n GPUs of each (`TypeRates`: the throughput
matrix where one is given, the performance model otherwise; controller.rates) and
asks the inner placer for a placement within the first type that has one (a copy of
the pool with every other type's nodes fenced off); only where no single type has
room does the inner placer see the whole pool, where the job runs at its slowest
type's speed. A running job keeping its size keeps its GPUs where they fit, as
`make_placer`'s wrapper (the inner placer here) decides for every placer. On a
cluster of one GPU type it is the inner placer.

So the policies that place through `Snapshot.placer` choose a type: FIFO, SRTF,
Tiresias (its consolidation within the type) and Gandiva (its packing and migration
within the type). Optimus and Pollux size jobs on GPU counts of their own and do not
place through it; the Gavel policies choose types themselves (policies/gavel/__init__.py).
Wrapped around the chosen placer by `gpuflow replay/compare` when a throughput matrix
is given (`--throughputs`, gpuflow/replay_cmd.py).
"""

from __future__ import annotations

from controller.model import Allocation, Cluster, GpuPool, JobView, Placer, TypeRates


class FastestTypePlacer:
    """Places each job on its fastest GPU type with room (module docstring)."""

    def __init__(self, inner: Placer, cluster: Cluster, rates: TypeRates) -> None:
        self.inner = inner
        self.cluster = cluster
        self.rates = rates
        names = sorted({node.gpu_type.name for node in cluster.nodes})
        self.nodes_of = {
            t: frozenset(i for i, n in enumerate(cluster.nodes) if n.gpu_type.name == t)
            for t in names
        }

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if len(self.nodes_of) < 2:
            return self.inner.place(pool, job, num_gpus)
        held = job.allocation
        if held is not None and held.num_gpus == num_gpus and pool.fits(held, job.spec.gpu_mem_mib):
            return self.inner.place(pool, job, num_gpus)
        for gpu in self.ranked(job, num_gpus):
            within = pool.copy()
            for node in range(len(self.cluster.nodes)):
                if node not in self.nodes_of[gpu]:
                    within.cordon(node)
            alloc = self.inner.place(within, job, num_gpus)
            if alloc is not None:
                return alloc
        return self.inner.place(pool, job, num_gpus)

    def ranked(self, job: JobView, num_gpus: int) -> list[str]:
        """The GPU types that can hold the gang, fastest first (ties by name)."""
        speeds = {t: self.rates.type_rate_ips(job.spec, t, num_gpus) for t in self.nodes_of}
        return sorted((t for t, r in speeds.items() if r), key=lambda t: (-(speeds[t] or 0.0), t))
