"""FIFO: the YARN capacity scheduler as deep-learning cluster studies run it.

Baseline of Tiresias (Gu et al., NSDI 2019, §6 "YARN-CS") and Gandiva: jobs start
in submission order, each gang all at once, and once started a job runs to the
end (no preemption). The head of the queue blocks the jobs behind it, as a
capacity scheduler that reserves resources for the head does; with
`backfill=True` later jobs that fit may start while the head waits (a deviation
from YARN-CS, offered for comparison).

Order: priority (higher first), then submit time, then job id. A round reads the
queue from its head (`Snapshot.waiting_in_order`, kept ordered by the backend) and
stops at the first job that does not fit: the jobs behind the head share one reason.
With backfill every waiting job is still offered to the placer each round (a placer
may place GPU shares when no whole GPU is free, or learn from each request).
GPUs come from the snapshot's placer, whose wrapper asks the GPU-choice filter
(controller.model.gpu_choice.candidates: no cordoned node, GPU models a job accepts, CPU and
memory for its pods); with quotas a start its queue does not allow at the job's
size waits with the quota's reason (`GpuFilter`), without blocking the head.

On a cluster of several GPU types each job goes to the type that runs it fastest with
room for its gang (`controller.model.gpu_choice.gpu_type.type_placer`, issue 31): the speeds
are the backend's (a replay's throughput matrix where one is given) or else the
catalogue's and the performance model's, so the operator and a replay choose alike.
YARN-CS knows no GPU types; `aware=False` leaves placement to the placer as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.gpu_choice.gpu_type import type_placer
from controller.model.job import short_of_gpus


@dataclass(frozen=True)
class Fifo:
    backfill: bool = False
    aware: bool = True
    name: str = "fifo"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        run: dict[str, Allocation] = snapshot.allocations()
        reasons: dict[str, Reason] = {}
        head: JobView | None = None
        started = 0
        if snapshot.waiting_count():
            pool, chooser = snapshot.free_pool(), GpuFilter(snapshot)
            placer = type_placer(snapshot) if self.aware else snapshot.placer
            for job in snapshot.waiting_in_order(fifo_key):
                alloc = placer.place(pool, job, job.spec.num_gpus)
                refused = None if alloc is None else chooser.quota_refusal(job, alloc)
                if refused is not None:
                    reasons[job.job_id] = refused  # its queue's turn, not the head's
                    continue
                if alloc is not None:
                    run[job.job_id] = chooser.take(pool, job, alloc)
                    started += 1
                    continue
                reasons[job.job_id] = _no_room(job, pool.total_free)
                if head is None:
                    head = job
                if not self.backfill:
                    break
        default = None
        if head is not None:
            behind = snapshot.waiting_count() - started - len(reasons)
            default = Reason(
                "QueuedBehind",
                f"waiting behind job {head.job_id} at the head of the FIFO queue, "
                f"and {behind} more behind",
            )
        return Plan(run=run, reasons=reasons, default_reason=default)

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """The FIFO order: priority (higher first), then submit time, then id."""
        return [j.job_id for j in sorted(snapshot.jobs, key=fifo_key)]


def fifo_key(job: JobView) -> tuple[int, float, str]:
    """FIFO's order (the `WaitingKey` the backend keeps the queue in)."""
    return (-job.spec.priority, job.spec.submit_s, job.job_id)


def _no_room(job: JobView, free: int) -> Reason:
    return short_of_gpus(job.spec.num_gpus, free, " but no placement fits the gang")
