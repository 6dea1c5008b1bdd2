"""EDF: earliest deadline first, the deadline baseline of ElasticFlow.

Gu et al., "ElasticFlow" (ASPLOS 2023), §6.1 baselines: "EDF" runs the jobs in the
order of their deadlines, each on the GPUs it asked for, with no admission control and
no elastic scaling; it is preemptive, so a job with an earlier deadline that arrives
takes GPUs from a running job with a later one. Jobs without a deadline come after
every job with one, in submission order. A job keeps running after its deadline passes
(it still counts as missed).

Each round the jobs are taken in that order and given their gang while the cluster's
usable GPUs last: with `gang="asked"` (the default) the GPUs each job asked for
(`num_gpus`); with `gang="max"` its largest size (`max_gpus`), or where fewer GPUs are
left the largest power of two of them, as ElasticFlow's own simulator runs its EDF
baseline (scheduler.py `edf_sim_allocation` gives each job its largest profiled size,
or the largest profiled size of the GPUs still free). `max_gpus_by` caps the largest
size by model (policies.size_caps): ElasticFlow's evaluation setting caps each job at
the largest size its T4 table profiles (yolov3 at batch 64: 16 GPUs, deepspeech2 at
batch 320: 32; bench/deadlines.py). docs/benchmarks.md compares both with the paper's
figure. A job that does not fit
is passed over, so smaller jobs behind it may still run. Running jobs so chosen keep
their GPUs; the others are placed by the snapshot's placer, in order, in what is left
(the placer's wrapper asks the GPU-choice filter, controller.model.gpu_choice.candidates; a job
its queue does not allow at its size waits with the quota's reason).
Deviation: a chosen job the placer cannot place for fragmentation waits with a reason
that says so rather than a whole repacking of the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.job import FRAGMENTED, does_not_fit
from policies.size_caps import capped_max_gpus, check_caps

GANGS = ("asked", "max")


@dataclass(frozen=True)
class Edf:
    gang: str = "asked"
    # With gang="max": a job's largest size capped by model or "model:batch"
    # (policies.size_caps); ElasticFlow's evaluation caps it at its table's sizes.
    max_gpus_by: Mapping[str, int] = field(default_factory=dict)
    name: str = "edf"

    def __post_init__(self) -> None:
        if self.gang not in GANGS:
            raise ValueError(f"gang must be one of {', '.join(GANGS)}, not {self.gang!r}")
        check_caps(self.max_gpus_by)

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        ordered = sorted(snapshot.jobs, key=deadline_key)
        budget = sum(snapshot.usable_gpus())
        size: dict[str, int] = {}
        chosen: set[str] = set()
        for job in ordered:
            gpus = self._size(job, budget)
            size[job.job_id] = gpus
            if gpus <= budget:
                chosen.add(job.job_id)
                budget -= gpus
        run: dict[str, Allocation] = {}
        pool, chooser = snapshot.free_pool(), GpuFilter(snapshot)
        for job in snapshot.running():
            if job.allocation is None:
                continue
            if job.job_id in chosen and job.num_gpus == size[job.job_id]:
                run[job.job_id] = job.allocation
            else:
                pool.release(job.allocation, job.spec.gpu_mem_mib)
                if job.job_id not in chosen:
                    chooser.release(job)
        reasons: dict[str, Reason] = {}
        for job in ordered:
            if job.job_id in run:
                continue
            if job.job_id not in chosen:
                reasons[job.job_id] = _later(job, size[job.job_id])
                continue
            alloc = snapshot.placer.place(pool, job, size[job.job_id])
            refused = None if alloc is None else chooser.quota_refusal(job, alloc)
            if alloc is None or refused is not None:
                reasons[job.job_id] = refused or Reason(
                    FRAGMENTED,
                    f"its turn by deadline came, but no placement of its {size[job.job_id]} "
                    f"GPUs fits the {pool.total_free} free",
                )
                continue
            run[job.job_id] = chooser.take(pool, job, alloc)
        return Plan(run=run, reasons=reasons)

    def _size(self, job: JobView, free_gpus: int) -> int:
        """The GPUs `job` is given with `free_gpus` left (more than that: it waits)."""
        spec = job.spec
        if self.gang == "asked" or spec.min_gpus > free_gpus:
            return spec.num_gpus
        top = min(capped_max_gpus(spec, self.max_gpus_by), free_gpus)
        power = 1 << (top.bit_length() - 1)
        return power if power >= spec.min_gpus else top

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """EDF's order: deadline (none last), then submit time, then id."""
        return [j.job_id for j in sorted(snapshot.jobs, key=deadline_key)]


def deadline_key(job: JobView) -> tuple[float, float, str]:
    """Earliest deadline first; jobs without one last; then submit time and id."""
    due = job.spec.due_s
    return (math.inf if due is None else due, job.spec.submit_s, job.job_id)


def _later(job: JobView, gpus: int) -> Reason:
    due = job.spec.due_s
    when = "has no deadline" if due is None else f"is due at {due:.0f} s"
    return does_not_fit(gpus, f"it {when}, and jobs due earlier hold the cluster", "QueuedBehind")
