"""The network in a simulation: each running multi-node job's inter-node rate.

With `SimConfig.network` other than "dedicated", running multi-node jobs share NICs
and rack uplinks: whenever that set of jobs changes (and after each round for the
time-dependent allocators), `controller.network.jobs.job_rates` gives each an
inter-node rate in Gbit/s (docs/network.md), and controller.sim.simulator re-rates
every job whose rate changed. controller.sim.runs joins and leaves jobs here.

`SimConfig.network_model` says which model turns the sharing into rates: "steady"
(`job_rates`: one rate per job with every job in flight, raised by the neighbours'
compute phases) or "phases" (`controller.network.phases.jobs.phase_job_rates`: compute
phases and all-reduce bursts run event by event where links are shared; the
networks cassini, crux and mltcp exist only there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controller.model import Allocation, Cluster
from controller.rates import RateModel
from controller.sim.job import SimJob

NETWORK_MODELS = ("steady", "phases")


def check_network(network: str, model: str) -> None:
    """Raise ValueError naming the field when `network` or `model` is unknown, or
    when the network has no form in that model."""
    if model not in NETWORK_MODELS:
        raise ValueError(f"unknown network model {model!r} (known: {', '.join(NETWORK_MODELS)})")
    if network == "dedicated":
        return
    # Imported only when needed: most replays share no links.
    from controller.network.jobs import network_names
    from controller.network.phases.jobs import PHASE_NETWORKS

    if model == "phases":
        if network not in PHASE_NETWORKS:
            known = ", ".join(("dedicated", *PHASE_NETWORKS))
            raise ValueError(f"network {network!r} has no phase-level form (known: {known})")
    elif network not in network_names():
        if network in PHASE_NETWORKS:
            raise ValueError(f"network {network!r} needs the network model 'phases'")
        known = ", ".join(network_names())
        raise ValueError(f"unknown network {network!r} (known: {known})")


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
        "time_dependent",
        "updates",
    )

    def __init__(self, network: str, model: str = "steady") -> None:
        self.network: str | None = None  # None: dedicated links, nothing shared
        self.time_dependent = False
        check_network(network, model)
        self.model = model
        if network != "dedicated":
            from controller.network.jobs import TIME_DEPENDENT

            self.network = network
            self.time_dependent = model == "steady" and network in TIME_DEPENDENT
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
        self.dirty |= self.time_dependent and bool(self.jobs)

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
        from controller.network.jobs import NetJob, job_rates, link_capacity, ring_flows
        from controller.network.phases.jobs import phase_job_rates

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
        if self.model == "phases":
            gbps = phase_job_rates(self.network, cluster, jobs, iteration_s, now_s)
        else:
            gbps = job_rates(self.network, cluster, jobs, iteration_s)
        self.updates += 1
        changed = []
        for job_id in ids:
            new = gbps[job_id]
            old = self.gbps.get(job_id)
            if old is None or abs(new - old) > 1e-9 * new:
                self.gbps[job_id] = new
                changed.append(job_id)
        return changed
