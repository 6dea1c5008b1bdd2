"""Job speeds: a running job's rate, busy GPUs and next events, set whenever what it
depends on changes.

A job's rate (reference-batch iterations per second, controller.rates.RateModel) follows
its allocation and batch, its GPU neighbours' load (controller.sim.sharing) and its
inter-node rate (controller.sim.bandwidth); a job sharing exactly its GPUs with one
other runs at its pair rate in the throughput matrix where the replay has one and the
pair is in it (Gavel's space sharing, `RateModel.pair_rate_ips`). Called by
controller.sim.runs when a job starts or its neighbours change, and by
controller.sim.simulator on re-rate events, a new batch and new network rates. Each
change bumps the job's version (outdating its pending events) and schedules its finish.

A job off its work batch earns the statistical gain at its progress
(`RateModel.goodput_factor`), so it is re-rated each time it has done `GAIN_STEP` of
its work more, even if nothing else happens.
"""

from __future__ import annotations

from controller.model import Allocation
from controller.sim.events import FINISH, RERATE
from controller.sim.job import SimJob
from controller.sim.parts import SimParts

# The measured runs behind the gain have at most 100 epochs (rows), so a step of 1 %
# of the work follows them row by row.
GAIN_STEP = 0.01


class Speeds:
    """Sets running jobs' rates from the rate model, their neighbours and the network."""

    __slots__ = ("accounts", "clock", "events", "network", "rates", "sharers", "table")

    def __init__(self, parts: SimParts) -> None:
        self.rates = parts.rates
        self.clock = parts.clock
        self.events = parts.events
        self.table = parts.table
        self.accounts = parts.accounts
        self.sharers = parts.sharers
        self.network = parts.network

    def rerate(self, job: SimJob) -> None:
        """Recompute a running job's speed and busy GPUs, and schedule its finish."""
        alloc = job.allocation
        assert alloc is not None
        now = self.clock.now_s
        job.advance(now)
        rates = self.rates
        spec = job.spec
        load = self._load(job)
        gbps = self.network.gbps_of(spec.job_id)
        batch = job.batch_size
        paired = self._pair_rate(job)
        rate = (
            paired
            if paired is not None
            else rates.rate_ips(spec, alloc, batch_size=batch, gpu_load=load, inter_node_gbps=gbps)
        )
        adaptive = batch is not None and batch != rates.reference_batch(spec)
        if adaptive:
            # Progress is counted in reference-batch iterations (see RateModel).
            rate = rates.work_rate_ips(spec, rate, batch, job.done_iters / job.total_iters)
        job.rate_ips = rate
        self.accounts.set_busy(job, self._busy_gpus(job, load, gbps, paired), now)
        job.version += 1
        self.table.touch(job)
        finish = job.finish_time_s()
        self.events.push(finish, FINISH, (spec.job_id, job.version))
        if adaptive:
            step_s = GAIN_STEP * job.total_iters / rate
            at = max(now, job.resume_s) + step_s
            if at < finish:
                self.events.push(at, RERATE, (spec.job_id, job.version))

    def iteration_s(self, job_id: str, gbps: float) -> float:
        """Seconds per iteration of a running job at `gbps` between its nodes."""
        job = self.table.active[job_id]
        assert job.allocation is not None
        rate = self.rates.rate_ips(
            job.spec,
            job.allocation,
            batch_size=job.batch_size,
            gpu_load=self._load(job),
            inter_node_gbps=gbps,
        )
        return 1.0 / rate

    def _pair_rate(self, job: SimJob) -> float | None:
        """The matrix's pair rate of a job sharing exactly its GPUs with one other, or
        None (no matrix, no such partner, or the pair not measured)."""
        alloc = job.allocation
        assert alloc is not None
        if not alloc.shared or self.rates.matrix is None:
            return None
        partner = self.sharers.partner(job, self.table.active)
        if partner is None:
            return None
        return self.rates.pair_rate_ips(job.spec, alloc, partner.spec)

    def _load(self, job: SimJob) -> float:
        assert job.allocation is not None
        if not job.allocation.shared:
            return 0.0
        return self.sharers.neighbour_load(job, self.table.active, self.rates)

    def _busy_gpus(
        self, job: SimJob, load: float, gbps: float | None, paired: float | None = None
    ) -> float:
        """How much GPU compute the job keeps busy: on each of its GPUs, its model's
        utilisation alone, scaled by its speed against the same GPUs unshared (so two
        packed jobs add up to at most one GPU, and a capped MPS share counts as its
        cap), and by its speed on the network allocator's rate against its links alone
        (time spent waiting on a shared link keeps no GPU busy). A job at its pair rate
        (`paired`) is scaled by that against its speed alone. This is what
        `gpu_utilization` integrates."""
        alloc = job.allocation
        assert alloc is not None
        util = self.rates.utilization(job.spec)
        if alloc.shared or load > 0:
            whole = self.rates.rate_ips(
                job.spec,
                Allocation.whole(alloc.gpus()),
                batch_size=job.batch_size,
                inter_node_gbps=gbps,
            )
            shared = (
                paired
                if paired is not None
                else self.rates.rate_ips(
                    job.spec, alloc, batch_size=job.batch_size, gpu_load=load, inter_node_gbps=gbps
                )
            )
            util *= min(1.0, shared / whole)
        if gbps is not None:
            # Waiting on a shared link is not compute: scale by the speed against the
            # job's links alone (Crux's GPU computation utilisation, SIGCOMM 2024 §3.1).
            free = self.rates.rate_ips(
                job.spec,
                alloc,
                batch_size=job.batch_size,
                gpu_load=load,
                inter_node_gbps=self.network.alone_of(job.spec.job_id),
            )
            contended = self.rates.rate_ips(
                job.spec, alloc, batch_size=job.batch_size, gpu_load=load, inter_node_gbps=gbps
            )
            util *= min(1.0, contended / free)
        return alloc.num_gpus * util
