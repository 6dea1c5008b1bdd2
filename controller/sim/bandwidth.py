"""The network in a simulation: each running multi-node job's inter-node rate.

With `SimConfig.network` other than "dedicated", running multi-node jobs share NICs
and rack uplinks: whenever that set of jobs changes (and after each round for the
time-dependent allocators), `controller.network.jobs.job_rates` gives each an
inter-node rate in Gbit/s (docs/network.md), and controller.sim.simulator re-rates
every job whose rate changed. controller.sim.runs joins and leaves jobs here.

`SimConfig.network_model` says which model turns the sharing into rates: "steady"
(`job_rates`: one rate per job with every job in flight, raised by the neighbours'
compute phases) or "phases" (`controller.network.phases.jobs.phase_job_rates`: compute
phases and all-reduce bursts run event by event where links are shared). Which
networks run in which model, each one's allocator or phase form and whether its
rates move with time, the network registry says (controller.network.registry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controller.model import Allocation, Cluster
from controller.network.jobs import NetJob, job_rates, link_capacity, ring_flows
from controller.network.phases.jobs import phase_job_rates
from controller.network.registry import PHASES, STEADY, Network, check
from controller.rates import RateModel
from controller.sim.job import SimJob


class InterNodeRates:
    """The multi-node jobs running, their allocated Gbit/s, and whether that set changed
    since the rates were last computed (`dirty`)."""

    __slots__ = (
        "alone_gbps",
        "dirty",
        "gbps",
        "jobs",
        "model",
        "network",
        "updates",
    )

    def __init__(self, network: str, model: str = STEADY) -> None:
        # None: dedicated links, nothing shared. ValueError naming the field
        # (registry.NetworkError) for an unknown network or model.
        self.network: Network | None = check(network, model)
        self.model = model
        self.jobs: dict[str, None] = {}
        self.gbps: dict[str, float] = {}
        self.alone_gbps: dict[str, float] = {}  # each job's slowest link's capacity
        self.dirty = False
        self.updates = 0  # how many times rates were recomputed

    def gbps_of(self, job_id: str) -> float | None:
        """The job's inter-node rate; None: its links alone (the perf model's default)."""
        return self.gbps.get(job_id) if self.gbps else None

    def alone_of(self, job_id: str) -> float | None:
        """The job's rate with its links to itself (None: not networked)."""
        return self.alone_gbps.get(job_id)

    def join(self, job_id: str, alloc: Allocation) -> None:
        if self.network is not None and len(alloc.nodes) > 1:
            self.jobs[job_id] = None
            self.dirty = True

    def leave(self, job_id: str) -> None:
        if job_id in self.jobs:
            del self.jobs[job_id]
            self.gbps.pop(job_id, None)
            self.alone_gbps.pop(job_id, None)
            self.dirty = True

    def after_round(self) -> None:
        """Attained bytes and remaining work move the allocation of some allocators."""
        moving = self.network is not None and self.network.time_dependent
        self.dirty |= moving and self.model == STEADY and bool(self.jobs)

    def recompute(
        self,
        cluster: Cluster,
        active: Mapping[str, SimJob],
        now_s: float,
        rates: RateModel,
        iteration_s: Callable[[str, float], float],
    ) -> list[str]:
        """Every networked job's rate under the allocator, as of `now_s`; the ids of the
        jobs whose rate changed, sorted. `iteration_s(job_id, gbps)` is a job's seconds
        per iteration at an inter-node rate."""
        self.dirty = False
        assert self.network is not None
        ids = sorted(self.jobs)
        jobs = []
        for job_id in ids:
            job = active[job_id]
            assert job.allocation is not None
            done = job.done_iters_at(now_s)
            jobs.append(
                NetJob(
                    job_id,
                    job.allocation.nodes,
                    rates.profile(job.spec).grad_mib,
                    arrival_s=job.spec.submit_s,
                    done_iters=done,
                    remaining_s=(job.total_iters - done) / job.nominal_rate_ips,
                    gpus=job.allocation.num_gpus,
                    started_s=job.resume_s,
                )
            )
        for net in jobs:
            if net.job_id not in self.alone_gbps:
                links = {link for f in ring_flows(cluster, net) for link in f.links}
                self.alone_gbps[net.job_id] = min(link_capacity(cluster, x) for x in links)
        if self.model == PHASES:
            assert self.network.phases is not None  # check() saw to it
            gbps = phase_job_rates(self.network.phases, cluster, jobs, iteration_s, now_s)
        else:
            assert self.network.allocator is not None  # check() saw to it
            gbps = job_rates(self.network.allocator, cluster, jobs, iteration_s)
        self.updates += 1
        changed = []
        for job_id in ids:
            new = gbps[job_id]
            old = self.gbps.get(job_id)
            if old is None or abs(new - old) > 1e-9 * new:
                self.gbps[job_id] = new
                changed.append(job_id)
        return changed
