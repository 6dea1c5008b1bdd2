"""When a round needs the policy: at the moments a replay decides, live too.

The simulator (controller.sim) runs a round when a job arrives or finishes, a node
fails, recovers or is cordoned, or the last plan's `wake_s` comes; between those
moments nothing a policy reads changes. A live backend wakes far more often (every
pod phase, status write and report is an informer event, ~50 ms apart), and a policy
asked again before the world moved re-decides what it just decided: Gandiva shrank a
job that had not started yet, Tiresias restarted a job its old pods still ran,
Pollux changed batch sizes every round. `Pace` holds the world the last decided
plan left behind and tells `controller.loop.Controller` whether a new snapshot
differs from it in a way that a replay would have met with a round:

- a job arrived or left (finished, cancelled, deleted), or its spec changed;
- a running job reported for the first time (live only: its measurements are what
  Pollux and Optimus then decide on, and they ask for their own next rounds);
- a job's allocation is not what the plan left (a start that failed, a crashed gang,
  a job requeued by the backend);
- a node went down or came back, was cordoned or uncordoned, or the cluster changed;
- a GPU is free that the plan neither left free nor freed (a pod of a deleted job
  finally gone, a node's GPU healthy again);
- the plan's `wake_s` has come, or the policy or the quotas were replaced.

GPUs a plan freed but that a backend still holds (a preempted job's pods writing
their checkpoint) become free afterwards, without a new round: the plan already decided
with them free. Otherwise the controller keeps the last plan (nothing starts, stops
or changes) without calling the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.model import Allocation, Cluster, GpuShare, JobSpec, Plan, Snapshot

Gpu = tuple[int, int]  # (node, GPU index)


@dataclass(frozen=True)
class Left:
    """What a decided round left: each job's GPU shares (None: waiting), the free GPUs,
    the node states, and when the plan asked to decide again."""

    cluster: Cluster
    down: frozenset[int]
    cordoned: frozenset[int]
    jobs: Mapping[str, tuple[JobSpec, tuple[GpuShare, ...] | None, bool]]
    free: frozenset[Gpu]
    wake_s: float | None
    policy: object
    quotas: object


def _shares(alloc: Allocation | None) -> tuple[GpuShare, ...] | None:
    return None if alloc is None else alloc.shares


def _gpus(allocs: Iterable[Allocation]) -> set[Gpu]:
    return {(s.node, s.gpu) for a in allocs for s in a.shares}


class Pace:
    """Remembers what the last decided round left (`decided`) and says whether a new
    snapshot needs the policy (`due`); `forget` makes the next round decide."""

    def __init__(self) -> None:
        self._left: Left | None = None

    def forget(self) -> None:
        self._left = None

    def decided(self, snapshot: Snapshot, plan: Plan, policy: object, quotas: object) -> None:
        before = snapshot.allocations()
        after = plan.run
        free = (set(snapshot.free_gpu_set()) | _gpus(before.values())) - _gpus(after.values())
        self._left = Left(
            cluster=snapshot.cluster,
            down=snapshot.down_nodes,
            cordoned=snapshot.cordoned_nodes,
            jobs={
                j.job_id: (j.spec, _shares(after.get(j.job_id)), j.measured is not None)
                for j in snapshot.jobs
            },
            free=frozenset(free),
            wake_s=plan.wake_s,
            policy=policy,
            quotas=quotas,
        )

    def due(self, snapshot: Snapshot, policy: object, quotas: object) -> bool:
        left = self._left
        if left is None or left.policy is not policy or left.quotas is not quotas:
            return True
        if left.wake_s is not None and snapshot.now_s >= left.wake_s:
            return True
        if (
            snapshot.cluster is not left.cluster
            or snapshot.down_nodes != left.down
            or snapshot.cordoned_nodes != left.cordoned
        ):
            return True
        jobs = left.jobs
        if len(snapshot.jobs) != len(jobs):
            return True
        for job in snapshot.jobs:
            was = jobs.get(job.job_id)
            if was is None or was[0] != job.spec or was[1] != _shares(job.allocation):
                return True
            if job.measured is not None and not was[2]:
                return True
        return not snapshot.free_gpu_set() <= left.free
