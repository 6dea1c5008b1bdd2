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
        order = sorted(
            snapshot.jobs, key=lambda j: (j.remaining_s_at(now), j.spec.submit_s, j.job_id)
        )
        budget = snapshot.cluster.num_gpus - _down_gpus(snapshot)
        chosen: list[JobView] = []
        for job in order:
            if job.spec.num_gpus <= budget:
                chosen.append(job)
                budget -= job.spec.num_gpus
        chosen_ids = {j.job_id for j in chosen}

        pool = snapshot.free_pool()
        for job in snapshot.jobs:
            if job.running and job.job_id not in chosen_ids and job.allocation is not None:
                pool.release(job.allocation, job.spec.gpu_mem_mib)

        run: dict[str, Allocation] = {}
        reasons: dict[str, Reason] = {}
        for job in chosen:
            if job.running and job.allocation is not None:
                run[job.job_id] = job.allocation
        for job in chosen:
            if job.running:
                continue
            alloc = snapshot.placer.place(pool, job, job.spec.num_gpus)
            if alloc is None:
                reasons[job.job_id] = Reason(
                    "Fragmented",
                    f"among the shortest jobs but no placement of {job.spec.num_gpus} GPUs fits",
                )
                continue
            pool.take(alloc, job.spec.gpu_mem_mib)
            run[job.job_id] = alloc
        default = Reason("ShorterJobsFirst", "jobs with less remaining time hold the GPUs")
        return Plan(run=run, reasons=reasons, default_reason=default)


def _down_gpus(snapshot: Snapshot) -> int:
    return sum(snapshot.cluster.nodes[n].num_gpus for n in snapshot.down_nodes)
