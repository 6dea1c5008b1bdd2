"""The active jobs of a simulation and the frozen views a round's snapshot is made of.

Owned by controller.sim.simulator's `Simulator`; changed by controller.sim.runs and
controller.sim.speed, which `touch` every record they change. Views are kept split by
state and rebuilt for the touched jobs only (`refresh`), so that a round costs little
for the jobs that did not change; the waiting ones are also kept in each policy's
order (`queues`, controller.sim.ordered) from the same changes. `views`,
`running_usage` and `waiting_gpus` are what the simulator's public surface reads for
local mode (controller.live).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from controller.model import WAITING, Allocation, JobStatus, JobView
from controller.sim.job import SimJob
from controller.sim.ordered import WaitingQueues


@dataclass(frozen=True, slots=True)
class RunningUsage:
    """A running job's use of the cluster now (`Simulator.running_usage`)."""

    job_id: str
    allocation: Allocation
    busy_gpus: float  # GPUs' worth of compute it keeps busy (0 while it pays a restart)
    inter_node_gbps: float | None  # None: its links alone (no network allocator)
    submit_s: float


class ActiveViews(Mapping[str, JobView]):
    """The running and the waiting views as one read-only mapping, live (a round's
    `Snapshot.index`). What a ChainMap of the two would be, but a job looked up among
    the waiting costs two dict lookups, not a KeyError raised and caught:
    `compile_plan` looks up every job a plan starts."""

    __slots__ = ("_run", "_wait")

    def __init__(self, run: dict[str, JobView], wait: dict[str, JobView]) -> None:
        self._run = run
        self._wait = wait

    def get(self, job_id: str, default: JobView | None = None) -> JobView | None:  # type: ignore[override]
        view = self._run.get(job_id)
        if view is None:
            view = self._wait.get(job_id, default)
        return view

    def __getitem__(self, job_id: str) -> JobView:
        view = self.get(job_id)
        if view is None:
            raise KeyError(job_id)
        return view

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._run or job_id in self._wait

    def __iter__(self) -> Iterator[str]:
        yield from self._wait  # a ChainMap's order: the last mapping's keys first
        yield from (k for k in self._run if k not in self._wait)

    def __len__(self) -> int:
        return len(self._run) + sum(1 for k in self._wait if k not in self._run)


class JobTable:
    """Active jobs by id (arrival order), running ones' allocations, cached views."""

    __slots__ = (
        "active",
        "allocations",
        "generation",
        "num_running",
        "queues",
        "stale",
        "views_run",
        "views_wait",
    )

    def __init__(self) -> None:
        self.active: dict[str, SimJob] = {}
        self.allocations: dict[str, Allocation] = {}  # running job -> its allocation
        self.num_running = 0
        self.generation = 0  # bumped by each refresh that changes a view
        self.views_run: dict[str, JobView] = {}
        self.views_wait: dict[str, JobView] = {}
        self.stale: dict[str, None] = {}
        self.queues = WaitingQueues(self.views_wait)

    def touch(self, job: SimJob) -> None:
        """The record changed: its view is rebuilt at the next refresh."""
        job.view_cache = None
        self.stale[job.spec.job_id] = None

    def refresh(self) -> None:
        """Rebuild the touched jobs' views (and forget those of jobs gone)."""
        if not self.stale:
            return
        self.generation += 1
        queues = self.queues
        for job_id in self.stale:
            self.views_run.pop(job_id, None)
            was_waiting = self.views_wait.pop(job_id, None)
            job = self.active.get(job_id)
            if job is not None and job.status is not JobStatus.RUNNING:
                view = self.views_wait[job_id] = job.view()
                queues.update(view, was_waiting)
                continue
            if job is not None:
                self.views_run[job_id] = job.view()
            if was_waiting is not None:
                queues.remove(was_waiting)
        self.stale.clear()

    def views(
        self, now_s: float, wanted: Callable[[str, JobStatus, int], bool] | None
    ) -> list[JobView]:
        """The active jobs picked by `wanted(job_id, status, restarts)` (default: all),
        advanced to `now_s`, in arrival order."""
        out = []
        for job_id, job in self.active.items():
            if wanted is None or wanted(job_id, job.status, job.restarts):
                job.advance(now_s)
                self.touch(job)  # its cached view is stale once advanced
                out.append(job.view())
        return out

    def running_usage(self, now_s: float, gbps: dict[str, float]) -> list[RunningUsage]:
        """Each running job's GPUs, busy compute and inter-node rate (from `gbps`) at
        `now_s`, in arrival order; nothing is advanced."""
        return [
            RunningUsage(
                job_id,
                job.allocation,
                job.busy_gpus if now_s >= job.resume_s else 0.0,
                gbps.get(job_id),
                job.spec.submit_s,
            )
            for job_id, job in self.active.items()
            if job.allocation is not None
        ]

    def waiting_gpus(self) -> list[int]:
        """The GPUs each waiting job asks for, in arrival order."""
        return [
            job.spec.num_gpus
            for job in self.active.values()
            if job.allocation is None and job.status in WAITING
        ]
