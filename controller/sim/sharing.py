"""GPU sharing: which jobs are packed on each shared GPU, and how loaded their neighbours are.

An allocation with a `GpuShare.fraction` below 1 shares that GPU; the performance model
slows each packed job by its neighbours' load (controller.rates.RateModel, `gpu_load`),
or, for two jobs on exactly the same GPUs (`partner`), gives each its pair rate where
the throughput matrix has one (`RateModel.pair_rate_ips`).
controller.sim.runs joins and leaves jobs here as they start and stop, and re-rates
the neighbours it is told of; controller.sim.speed reads `neighbour_load`.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.model import Allocation, JobStatus
from controller.rates import RateModel
from controller.sim.job import SimJob


class GpuSharers:
    """(node, GPU) -> the ids of the jobs on it, for GPUs shared by fractions."""

    __slots__ = ("by_gpu",)

    def __init__(self) -> None:
        self.by_gpu: dict[tuple[int, int], set[str]] = {}

    def join(self, job: SimJob, alloc: Allocation, active: Mapping[str, SimJob]) -> set[SimJob]:
        """Put the job on its shared GPUs; the active jobs already there."""
        touched: set[str] = set()
        for s in alloc.shares:
            if s.fraction < 1.0:
                ids = self.by_gpu.setdefault((s.node, s.gpu), set())
                touched |= ids
                ids.add(job.spec.job_id)
        return {active[i] for i in touched if i in active}

    def leave(self, job: SimJob, alloc: Allocation, active: Mapping[str, SimJob]) -> list[SimJob]:
        """Take the job off its GPUs; the other running jobs it leaves there, by id."""
        touched: set[str] = set()
        for s in alloc.shares:
            ids = self.by_gpu.get((s.node, s.gpu))
            if ids is None:
                continue
            ids.discard(job.spec.job_id)
            touched |= ids
            if not ids:
                del self.by_gpu[(s.node, s.gpu)]
        others = [active[i] for i in sorted(touched) if i in active]
        return [o for o in others if o.status is JobStatus.RUNNING and o is not job]

    def partner(self, job: SimJob, active: Mapping[str, SimJob]) -> SimJob | None:
        """The one other active job on exactly the job's GPUs, where there is one (a
        pair sharing them, as Gavel's space sharing places it); None otherwise."""
        assert job.allocation is not None
        others: set[str] = set()
        for s in job.allocation.shares:
            others |= self.by_gpu.get((s.node, s.gpu), set())
        others.discard(job.spec.job_id)
        if len(others) != 1:
            return None
        other = active.get(next(iter(others)))
        if other is None or other.allocation is None:
            return None
        return other if other.allocation.gpus() == job.allocation.gpus() else None

    def neighbour_load(self, job: SimJob, active: Mapping[str, SimJob], rates: RateModel) -> float:
        """The largest sum of the other jobs' utilisation on any of the job's GPUs."""
        assert job.allocation is not None
        worst = 0.0
        for s in job.allocation.shares:
            ids = self.by_gpu.get((s.node, s.gpu), ())
            load = sum(
                rates.utilization(active[i].spec)
                for i in ids
                if i != job.spec.job_id and i in active
            )
            worst = max(worst, load)
        return worst
