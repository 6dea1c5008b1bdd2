"""The GPU type a job runs fastest on: the one rule by which placement and the policies
choose among a heterogeneous cluster's types (issue 31, item 3).

A job's speed on n GPUs of a type is `TypeRates.type_rate_ips`: the backend's own
speeds where it hands them over (`Snapshot.type_rates`: in a replay the simulator's
RateModel, the throughput matrix's rates where `--throughputs` gives one), else the
performance model's on the type (`controller.model.perf.matrix.ModelTypeRates`). A job on
GPUs of several types runs at its slowest type's rate, as in Gavel (Narayanan et al.,
OSDI 2020, §3.1), so a gang goes to one type where one has room.

`FastestTypePlacer` wraps any placer with that rule; `type_placer` is what a policy
that places through `Snapshot.placer` (Tiresias, Gandiva, FIFO, SRTF) wraps the
snapshot's placer with each round, with or without a throughput matrix, so that the
operator and a replay choose alike; `ranked_types` and `within_type` serve the
policies that place by GPU counts of their own (Optimus). `gpuflow replay/compare`
also wraps the replay's placer when a throughput matrix is given
(gpuflow/replay_cmd.py), for the policies that do not choose themselves (EDF). On a
cluster of one GPU type every function here hands back what it was given: the
policies run as they always did.
"""

from __future__ import annotations

from controller.model.allocation import Allocation
from controller.model.cluster import Cluster
from controller.model.job import JobSpec, JobView
from controller.model.perf.matrix import ModelTypeRates
from controller.model.pool import GpuPool
from controller.model.snapshot import Placer, Snapshot, TypeRates


def nodes_by_type(cluster: Cluster) -> dict[str, frozenset[int]]:
    """Each GPU type's node indices, types by name."""
    nodes: dict[str, set[int]] = {}
    for index, node in enumerate(cluster.nodes):
        nodes.setdefault(node.gpu_type.name, set()).add(index)
    return {name: frozenset(nodes[name]) for name in sorted(nodes)}


def is_heterogeneous(cluster: Cluster) -> bool:
    """Whether the cluster has nodes of more than one GPU type."""
    first = cluster.nodes[0].gpu_type.name if cluster.nodes else ""
    return any(node.gpu_type.name != first for node in cluster.nodes)


def snapshot_rates(snapshot: Snapshot) -> TypeRates:
    """The speeds a policy chooses types by: the backend's, else the performance
    model's (module docstring)."""
    return snapshot.type_rates or ModelTypeRates(snapshot.cluster)


def rates_to_choose(snapshot: Snapshot) -> TypeRates | None:
    """`snapshot_rates` on a heterogeneous cluster; None on a cluster of one type,
    where there is nothing to choose."""
    return snapshot_rates(snapshot) if is_heterogeneous(snapshot.cluster) else None


def ranked_types(rates: TypeRates, spec: JobSpec, types: list[str], num_gpus: int) -> list[str]:
    """Those of `types` that can hold `num_gpus` GPUs of the job, fastest for it
    first (ties by name)."""
    speeds = {t: rates.type_rate_ips(spec, t, num_gpus) for t in types}
    return sorted((t for t, r in speeds.items() if r), key=lambda t: (-(speeds[t] or 0.0), t))


def within_type(pool: GpuPool, cluster: Cluster, nodes: frozenset[int]) -> GpuPool:
    """A copy of `pool` offering only the GPUs of `nodes` (the others fenced off)."""
    within = pool.copy()
    for node in range(len(cluster.nodes)):
        if node not in nodes:
            within.cordon(node)
    return within


class FastestTypePlacer:
    """Places each job on its fastest GPU type with room.

    For a job on n GPUs it ranks the cluster's GPU types by the job's speed on n GPUs
    of each and asks the inner placer for a placement within the first type that has
    one (`within_type`); only where no single type has room does the inner placer see
    the whole pool, where the job runs at its slowest type's speed. A running job
    keeping its size keeps its GPUs where they fit, as every placer does. On a
    cluster of one GPU type it is the inner placer.
    """

    def __init__(self, inner: Placer, cluster: Cluster, rates: TypeRates) -> None:
        self.inner = inner
        self.cluster = cluster
        self.rates = rates
        self.nodes_of = nodes_by_type(cluster)

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        if len(self.nodes_of) < 2:
            return self.inner.place(pool, job, num_gpus)
        held = job.allocation
        if held is not None and held.num_gpus == num_gpus and pool.fits(held, job.spec.gpu_mem_mib):
            return self.inner.place(pool, job, num_gpus)
        for gpu in self.ranked(job, num_gpus):
            within = within_type(pool, self.cluster, self.nodes_of[gpu])
            alloc = self.inner.place(within, job, num_gpus)
            if alloc is not None:
                return alloc
        return self.inner.place(pool, job, num_gpus)

    def ranked(self, job: JobView, num_gpus: int) -> list[str]:
        """The GPU types that can hold the gang, fastest first (ties by name)."""
        return ranked_types(self.rates, job.spec, list(self.nodes_of), num_gpus)


def type_placer(snapshot: Snapshot) -> Placer:
    """The snapshot's placer, choosing the fastest type for each job on a
    heterogeneous cluster (unless it does already); the placer itself on a cluster of
    one type."""
    placer = snapshot.placer
    if isinstance(placer, FastestTypePlacer) or not is_heterogeneous(snapshot.cluster):
        return placer
    return FastestTypePlacer(placer, snapshot.cluster, snapshot_rates(snapshot))
