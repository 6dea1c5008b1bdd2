"""The network in a simulation: each running multi-node job's inter-node rate.

With `SimConfig.network` other than "dedicated", running multi-node jobs share NICs
and rack uplinks: whenever that set of jobs changes (and after each round for the
time-dependent allocators), `controller.network.jobs.job_rates` gives each an
inter-node rate in Gbit/s (docs/network.md), and controller.sim.simulator re-rates
every job whose rate changed. controller.sim.runs joins and leaves jobs here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controller.model import Allocation, Cluster
from controller.rates import RateModel
from controller.sim.job import SimJob


class InterNodeRates:
    """The multi-node jobs running, their allocated Gbit/s, and whether that set changed
    since the rates were last computed (`dirty`)."""

    __slots__ = ("dirty", "gbps", "jobs", "network", "time_dependent", "updates")

    def __init__(self, network: str) -> None:
        self.network: str | None = None  # None: dedicated links, nothing shared
        self.time_dependent = False
        if network != "dedicated":
            # Imported only when needed: most replays share no links.
            from controller.network.jobs import TIME_DEPENDENT, network_names

            if network not in network_names():
                known = ", ".join(network_names())
                raise ValueError(f"unknown network {network!r} (known: {known})")
            self.network = network
            self.time_dependent = network in TIME_DEPENDENT
        self.jobs: dict[str, None] = {}
        self.gbps: dict[str, float] = {}
        self.dirty = False
        self.updates = 0  # how many times rates were recomputed

    def gbps_of(self, job_id: str) -> float | None:
        """The job's inter-node rate; None: its links alone (the perf model's default)."""
        return self.gbps.get(job_id) if self.gbps else None

    def join(self, job_id: str, alloc: Allocation) -> None:
        if self.network is not None and len(alloc.nodes) > 1:
            self.jobs[job_id] = None
            self.dirty = True

    def leave(self, job_id: str) -> None:
        if job_id in self.jobs:
            del self.jobs[job_id]
            self.gbps.pop(job_id, None)
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
        from controller.network.jobs import NetJob, job_rates

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
                )
            )
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
