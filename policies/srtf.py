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

Restart cost: not charged. SRTF is kept the clairvoyant baseline as Tiresias defines
it (§6.2), which preempts whenever a shorter job waits; charging the restart would
make it another policy than the one the papers compare against. The preempted job
pays its restart (the model's `restart_s`) in the replay all the same.

A waiting job's remaining time does not change while it waits, so the backend keeps
the queue in that order (`Snapshot.waiting_by_size`); the greedy pass takes, at each
step, the first job in the order among the gang sizes that still fit, and stops when
no size fits: a round reads the jobs it chooses, not the whole queue. GPUs come from
the snapshot's placer, whose wrapper asks the GPU-choice filter
(controller.model.gpu_choice.candidates), and a start its queue does not allow (quotas) waits.

On a cluster of several GPU types a job it starts goes to the type that runs it
fastest with room for its gang (`controller.model.gpu_choice.gpu_type.type_placer`, issue 31:
the backend's speeds, else the catalogue's and the performance model's); the
remaining time that orders the jobs stays the nominal one. `aware=False` leaves
placement to the placer as given.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.gpu_choice.gpu_type import type_placer
from controller.model.job import FRAGMENTED

# Up to this many jobs per GPU alive, sorting every job costs less than walking the
# ordered queue (a C sort against a heap step per job chosen; about as many jobs are
# chosen as run). Both give the same choice.
_SORT_ALL_JOBS = 4


@dataclass(frozen=True)
class Srtf:
    aware: bool = True
    name: str = "srtf"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        budget = snapshot.cluster.num_gpus - _down_gpus(snapshot)
        # SRTF starts every job on exactly its gang size in whole GPUs, so the GPUs
        # held are the running jobs' demand (and cost nothing to count).
        held = budget - snapshot.free_gpu_count()
        if held + snapshot.waiting_gpus_asked() <= budget:
            # Everyone fits the budget, so the greedy pass below would choose every
            # job: keep the running ones and start the rest, shortest first.
            shortest_first = sorted(snapshot.waiting(), key=srtf_key)
            return self._place(snapshot, snapshot.allocations(), shortest_first)
        run: dict[str, Allocation] = {}
        to_start: list[JobView] = []
        if len(snapshot.running()) + snapshot.waiting_count() <= _SORT_ALL_JOBS * budget:
            chosen = _shortest_fitting_sorted(snapshot, budget)
        else:
            chosen = _shortest_fitting(snapshot, budget)
        for job in chosen:
            if job.allocation is not None and job.running:
                run[job.job_id] = job.allocation
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
            pool, chooser = snapshot.free_pool(), GpuFilter(snapshot)
            for job in snapshot.running():
                if job.job_id not in run and job.allocation is not None:
                    pool.release(job.allocation, job.spec.gpu_mem_mib)
                    chooser.release(job)
            placer = type_placer(snapshot) if self.aware else snapshot.placer
            for job in to_start:
                alloc = placer.place(pool, job, job.spec.num_gpus)
                refused = None if alloc is None else chooser.quota_refusal(job, alloc)
                if alloc is None or refused is not None:
                    reasons[job.job_id] = refused or Reason(
                        FRAGMENTED,
                        f"among the shortest jobs but no placement of "
                        f"{job.spec.num_gpus} GPUs fits",
                    )
                    continue
                run[job.job_id] = chooser.take(pool, job, alloc)
        default = Reason("ShorterJobsFirst", "jobs with less remaining time hold the GPUs")
        return Plan(run=run, reasons=reasons, default_reason=default)


def srtf_key(job: JobView) -> tuple[float, float, str]:
    """A waiting job's place in SRTF's order (the `WaitingKey` the backend keeps the
    queue in): its remaining time does not move while it waits."""
    return (job.remaining_s_at(0.0), job.spec.submit_s, job.job_id)


def _shortest_fitting_sorted(snapshot: Snapshot, budget: int) -> Iterator[JobView]:
    """`_shortest_fitting` by sorting every job: cheaper while the queue is short."""
    now = snapshot.now_s
    order = sorted((j.remaining_s_at(now), j.spec.submit_s, j.job_id, j) for j in snapshot.jobs)
    for _, _, _, job in order:
        need = job.spec.num_gpus
        if need > budget:
            continue
        budget -= need
        yield job


def _shortest_fitting(snapshot: Snapshot, budget: int) -> Iterator[JobView]:
    """The greedy choice over every job (running and waiting) by remaining time: each
    job in order is taken if its gang fits what is left of `budget`, else skipped.

    A skipped gang size never fits again (the budget only shrinks), so the walk keeps
    one ordered stream per size, takes the first head among the sizes that fit, drops
    sizes as they stop fitting, and ends when none does."""
    now = snapshot.now_s
    streams: dict[int, list[Iterator[tuple[tuple[float, float, str], JobView]]]] = {}
    for n, jobs in snapshot.waiting_by_size(srtf_key).items():
        streams.setdefault(n, []).append((srtf_key(j), j) for j in jobs)
    running: dict[int, list[tuple[tuple[float, float, str], JobView]]] = {}
    for job in snapshot.running():
        key = (job.remaining_s_at(now), job.spec.submit_s, job.job_id)
        running.setdefault(job.spec.num_gpus, []).append((key, job))
    for n, keyed in running.items():
        keyed.sort(key=lambda kj: kj[0])
        streams.setdefault(n, []).append(iter(keyed))
    heads: list[tuple[tuple[float, float, str], int, JobView]] = []
    merged: dict[int, Iterator[tuple[tuple[float, float, str], JobView]]] = {}
    for n, parts in streams.items():
        if n > budget:
            continue
        merged[n] = heapq.merge(*parts, key=lambda kj: kj[0]) if len(parts) > 1 else parts[0]
        first = next(merged[n], None)
        if first is not None:
            heads.append((first[0], n, first[1]))
    heapq.heapify(heads)
    while heads:
        _, n, job = heapq.heappop(heads)
        if n > budget:
            continue  # this size no longer fits: its stream is dropped
        budget -= n
        yield job
        following = next(merged[n], None)
        if following is not None:
            heapq.heappush(heads, (following[0], n, following[1]))


def _down_gpus(snapshot: Snapshot) -> int:
    return sum(snapshot.cluster.nodes[n].num_gpus for n in snapshot.down_nodes)
