"""FIFO: the YARN capacity scheduler as deep-learning cluster studies run it.

Baseline of Tiresias (Gu et al., NSDI 2019, §6 "YARN-CS") and Gandiva: jobs start
in submission order, each gang all at once, and once started a job runs to the
end (no preemption). The head of the queue blocks the jobs behind it, as a
capacity scheduler that reserves resources for the head does; with
`backfill=True` later jobs that fit may start while the head waits (a deviation
from YARN-CS, offered for comparison).

Order: priority (higher first), then submit time, then job id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot


@dataclass(frozen=True)
class Fifo:
    backfill: bool = False
    name: str = "fifo"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        run: dict[str, Allocation] = snapshot.allocations()
        waiting = sorted(
            snapshot.waiting(), key=lambda j: (-j.spec.priority, j.spec.submit_s, j.job_id)
        )
        reasons: dict[str, Reason] = {}
        head: JobView | None = None
        if waiting:
            pool = snapshot.free_pool()
            for job in waiting:
                alloc = snapshot.placer.place(pool, job, job.spec.num_gpus)
                if alloc is not None:
                    pool.take(alloc, job.spec.gpu_mem_mib)
                    run[job.job_id] = alloc
                    continue
                reasons[job.job_id] = _no_room(job, pool.total_free)
                if head is None:
                    head = job
                if not self.backfill:
                    break
        default = None
        if head is not None:
            default = Reason(
                "QueuedBehind", f"waiting behind job {head.job_id} at the head of the FIFO queue"
            )
        return Plan(run=run, reasons=reasons, default_reason=default)

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """The FIFO order: priority (higher first), then submit time, then id."""
        jobs = sorted(snapshot.jobs, key=lambda j: (-j.spec.priority, j.spec.submit_s, j.job_id))
        return [j.job_id for j in jobs]


def _no_room(job: JobView, free: int) -> Reason:
    need = job.spec.num_gpus
    if free >= need:
        return Reason(
            "Fragmented", f"needs {need} GPUs; {free} are free but no placement fits the gang"
        )
    return Reason("InsufficientGpus", f"needs {need} GPUs; {free} are free")
