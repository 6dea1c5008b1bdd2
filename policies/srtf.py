"""SRTF: shortest remaining time first, an oracle baseline.

The clairvoyant comparison point used by Tiresias (Gu et al., NSDI 2019, §6.2:
"SRTF ... requires job duration information") and Gandiva-style studies: each round
the jobs with the least remaining run time hold the GPUs, preempting longer ones.
Remaining time is the job's remaining work at its nominal speed on the GPUs it asked
for (the simulator knows the work; a live cluster does not, so this policy is for
replays).

Greedy with skipping: a job that does not fit the GPUs left is passed over and
smaller, longer jobs behind it may run (as the Tiresias simulator's SRTF does).
Ties break on submit time, then job id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot


@dataclass(frozen=True)
class Srtf:
    name: str = "srtf"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        now = snapshot.now_s
        waiting = snapshot.waiting()
        budget = snapshot.cluster.num_gpus - _down_gpus(snapshot)
        # SRTF starts every job on exactly its gang size in whole GPUs, so the GPUs
        # held are the running jobs' demand (and cost nothing to count).
        held = budget - snapshot.free_gpu_count()
        if held + sum(j.spec.num_gpus for j in waiting) <= budget:
            # Everyone fits the budget, so the greedy pass below would choose every
            # job: keep the running ones and start the rest, shortest first.
            shortest_first = sorted(
                waiting, key=lambda j: (j.remaining_s_at(now), j.spec.submit_s, j.job_id)
            )
            return self._place(snapshot, snapshot.allocations(), shortest_first)
        order = sorted((j.remaining_s_at(now), j.spec.submit_s, j.job_id, j) for j in snapshot.jobs)
        run: dict[str, Allocation] = {}
        to_start: list[JobView] = []
        for _, _, job_id, job in order:
            need = job.spec.num_gpus
            if need > budget:
                continue
            budget -= need
            if job.allocation is not None and job.running:
                run[job_id] = job.allocation
            else:
                to_start.append(job)
        return self._place(snapshot, run, to_start)

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Least remaining time first (at nominal speed), then submit time, then id."""
        now = snapshot.now_s
        jobs = sorted(
            snapshot.jobs, key=lambda j: (j.remaining_s_at(now), j.spec.submit_s, j.job_id)
        )
        return [j.job_id for j in jobs]

    def _place(
        self, snapshot: Snapshot, run: dict[str, Allocation], to_start: list[JobView]
    ) -> Plan:
        """Place `to_start` in order on what `run` leaves free; the plan."""
        reasons: dict[str, Reason] = {}
        if to_start:
            pool = snapshot.free_pool()
            for job in snapshot.running():
                if job.job_id not in run and job.allocation is not None:
                    pool.release(job.allocation, job.spec.gpu_mem_mib)
            for job in to_start:
                alloc = snapshot.placer.place(pool, job, job.spec.num_gpus)
                if alloc is None:
                    reasons[job.job_id] = Reason(
                        "Fragmented",
                        f"among the shortest jobs but no placement of "
                        f"{job.spec.num_gpus} GPUs fits",
                    )
                    continue
                pool.take(alloc, job.spec.gpu_mem_mib)
                run[job.job_id] = alloc
        default = Reason("ShorterJobsFirst", "jobs with less remaining time hold the GPUs")
        return Plan(run=run, reasons=reasons, default_reason=default)


def _down_gpus(snapshot: Snapshot) -> int:
    return sum(snapshot.cluster.nodes[n].num_gpus for n in snapshot.down_nodes)
