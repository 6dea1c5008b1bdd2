"""EDF: earliest deadline first, the deadline baseline of ElasticFlow.

Gu et al., "ElasticFlow" (ASPLOS 2023), §6.1 baselines: "EDF" runs the jobs in the
order of their deadlines, each on the GPUs it asked for, with no admission control and
no elastic scaling; it is preemptive, so a job with an earlier deadline that arrives
takes GPUs from a running job with a later one. Jobs without a deadline come after
every job with one, in submission order. A job keeps running after its deadline passes
(it still counts as missed).

Each round the jobs are taken in that order and given their gang (`num_gpus`) while
the cluster's usable GPUs last; a job that does not fit is passed over, so smaller jobs
behind it may still run (as ElasticFlow's EDF does). Running jobs so chosen keep their
GPUs; the others are placed by the snapshot's placer, in order, in what is left.
Deviation: a chosen job the placer cannot place for fragmentation waits with a reason
that says so rather than a whole repacking of the cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot


@dataclass(frozen=True)
class Edf:
    name: str = "edf"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        ordered = sorted(snapshot.jobs, key=deadline_key)
        budget = sum(snapshot.usable_gpus())
        chosen: set[str] = set()
        for job in ordered:
            if job.spec.num_gpus <= budget:
                chosen.add(job.job_id)
                budget -= job.spec.num_gpus
        run: dict[str, Allocation] = {}
        pool = snapshot.free_pool()
        for job in snapshot.running():
            if job.allocation is None:
                continue
            if job.job_id in chosen and job.num_gpus == job.spec.num_gpus:
                run[job.job_id] = job.allocation
            else:
                pool.release(job.allocation, job.spec.gpu_mem_mib)
        reasons: dict[str, Reason] = {}
        for job in ordered:
            if job.job_id in run:
                continue
            if job.job_id not in chosen:
                reasons[job.job_id] = _later(job)
                continue
            alloc = snapshot.placer.place(pool, job, job.spec.num_gpus)
            if alloc is None:
                reasons[job.job_id] = Reason(
                    "Fragmented",
                    f"its turn by deadline came, but no placement of its {job.spec.num_gpus} "
                    f"GPUs fits the {pool.total_free} free",
                )
                continue
            pool.take(alloc, job.spec.gpu_mem_mib)
            run[job.job_id] = alloc
        return Plan(run=run, reasons=reasons)

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """EDF's order: deadline (none last), then submit time, then id."""
        return [j.job_id for j in sorted(snapshot.jobs, key=deadline_key)]


def deadline_key(job: JobView) -> tuple[float, float, str]:
    """Earliest deadline first; jobs without one last; then submit time and id."""
    due = job.spec.due_s
    return (math.inf if due is None else due, job.spec.submit_s, job.job_id)


def _later(job: JobView) -> Reason:
    due = job.spec.due_s
    when = "has no deadline" if due is None else f"is due at {due:.0f} s"
    return Reason(
        "QueuedBehind",
        f"needs {job.spec.num_gpus} GPUs; it {when}, and jobs due earlier hold the cluster",
    )
