"""CASSINI's placement: among equally good GPU sets, the one whose links suit its pattern.

CASSINI (Rajasekaran, Ghobadi, Akella, NSDI 2024, §4.1) takes the candidate
placements a scheduler proposes and keeps the one whose jobs sharing a link have the
most compatible communication patterns: those whose bursts, rotated by the best
time-shifts, fit within the link's capacity over one period. `CassiniPlacer` wraps
the policy's placer (cassini's placer wrapper in the network registry,
controller.network.registry; callers: bench/network.py and the replay command's
placer set-up, through `registry.wrap_placer`); the time-shifts themselves
are then found by `controller.network.phases.cassini.time_shifts` as for any placement.

Candidates: the inner placer's own choice, then its choice on the pool with each
rack (each aggregation group in a Clos) of that first choice cordoned, one at a time;
only multi-node candidates whose iteration time alone (`controller.model.perf`) is
within `TIME_TOLERANCE` of the first are kept, so the job loses nothing by the move.
Score per link the candidate crosses: the link's load, the sum over the jobs on it
(the candidate included) of their mean rate (bytes per iteration over the iteration
time alone, at the slowest link's capacity as in `phase_jobs`) over the link's
capacity. With the best shifts, bursts of jobs of equal period fit in the period
exactly when that sum is at most 1; CASSINI's
compatibility score (§3.2) is 1 minus the demand above capacity. The candidate with
the smallest worst excess (load above 1) wins, then the smallest total load on its
shared links, then the inner placer's order.

Deviations: CASSINI scores candidates by solving its shift optimisation on each;
here the load sum stands for it (exact for equal periods, optimistic for unequal
ones), which keeps a placement call in the tens of microseconds. The placer sees
no snapshot, so it knows the running jobs from the allocations it handed out: an
entry is dropped when one of its GPUs shows free in a pool, or a new allocation
takes one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model import Allocation, Cluster, GpuPool, JobView, Placer
from controller.model.catalog import resolve
from controller.model.perf import iteration_time_s
from controller.network.jobs import NetJob, link_capacity, ring_flows
from controller.network.model import LinkId

# Alone iteration times within 1 % count as equal (the topology-aware placer's tolerance).
TIME_TOLERANCE = 0.01


@dataclass(frozen=True, slots=True)
class _Placed:
    gpus: frozenset[tuple[int, int]]
    links: tuple[LinkId, ...]
    mean_gbps: float


class CassiniPlacer:
    """`inner`'s placement, moved among equally fast candidates to the most compatible
    links (module docstring)."""

    def __init__(self, inner: Placer, cluster: Cluster) -> None:
        self.inner = inner
        self.cluster = cluster
        self.placed: dict[str, _Placed] = {}
        self.moved = 0  # placements that differ from the inner placer's

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        first = self.inner.place(pool, job, num_gpus)
        self._forget_freed(pool)
        if first is None or len(first.nodes) < 2:
            self._record(job, first)
            return first
        if job.allocation is not None and set(job.allocation.nodes) == set(first.nodes):
            self._record(job, first)  # a running job keeps its GPUs
            return first
        best_s = self._alone_s(job, first) * (1.0 + TIME_TOLERANCE)
        options = [first]
        for fence in self._fences(first):
            view = pool.copy()
            for node in fence:
                view.cordon(node)
            alt = self.inner.place(view, job, num_gpus)
            if alt is None or len(alt.nodes) < 2 or alt in options:
                continue
            if self._alone_s(job, alt) <= best_s:
                options.append(alt)
        scored = [(self._score(job, alt), i) for i, alt in enumerate(options)]
        chosen = options[min(scored)[1]]
        if chosen is not first:
            self.moved += 1
        self._record(job, chosen)
        return chosen

    def _fences(self, alloc: Allocation) -> list[list[int]]:
        """Node sets to cordon, one per rack (and per group) the allocation uses."""
        nodes = self.cluster.nodes
        racks = sorted({nodes[n].rack for n in alloc.nodes})
        fences = [[i for i, node in enumerate(nodes) if node.rack == r] for r in racks]
        if self.cluster.groups:
            groups = sorted({self.cluster.racks[r].group for r in racks})
            for g in groups:
                fences.append(
                    [i for i, node in enumerate(nodes) if self.cluster.racks[node.rack].group == g]
                )
        return fences

    def _alone_s(self, job: JobView, alloc: Allocation) -> float:
        return iteration_time_s(
            resolve(job.spec.model), self.cluster, alloc, batch_size=job.batch_size
        )

    def _links_and_rate(self, job: JobView, alloc: Allocation) -> _Placed:
        grad_mib = resolve(job.spec.model).grad_mib
        net = NetJob(job.job_id, tuple(sorted(set(alloc.nodes))), grad_mib)
        links = tuple(
            dict.fromkeys(link for f in ring_flows(self.cluster, net) for link in f.links)
        )
        # As the phase model: alone, the job's ring runs at its slowest link's capacity.
        d = min(link_capacity(self.cluster, link) for link in links)
        alone_s = iteration_time_s(
            resolve(job.spec.model),
            self.cluster,
            alloc,
            batch_size=job.batch_size,
            inter_node_gbps=d,
        )
        mean_gbps = net.flow_mb / 125.0 / alone_s
        gpus = frozenset((s.node, s.gpu) for s in alloc.shares)
        return _Placed(gpus, links, mean_gbps)

    def _score(self, job: JobView, alloc: Allocation) -> tuple[float, float]:
        mine = self._links_and_rate(job, alloc)
        others = [p for jid, p in self.placed.items() if jid != job.job_id]
        worst, total = 0.0, 0.0
        for link in mine.links:
            sharing = [p.mean_gbps for p in others if link in p.links]
            if not sharing:
                continue
            load = (mine.mean_gbps + sum(sharing)) / link_capacity(self.cluster, link)
            worst = max(worst, load - 1.0)
            total += load
        return (max(0.0, worst), total)

    def _record(self, job: JobView, alloc: Allocation | None) -> None:
        self.placed.pop(job.job_id, None)
        if alloc is None:
            return
        if len(alloc.nodes) < 2:
            return
        entry = self._links_and_rate(job, alloc)
        for jid in [j for j, p in self.placed.items() if p.gpus & entry.gpus]:
            del self.placed[jid]
        self.placed[job.job_id] = entry

    def _forget_freed(self, pool: GpuPool) -> None:
        free = {(n, g) for n in range(pool.num_nodes) for g in pool.free_gpus(n)}
        for jid in [j for j, p in self.placed.items() if p.gpus & free]:
            del self.placed[jid]
