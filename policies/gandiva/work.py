"""The plan one Gandiva round builds: allocations, the free pool, and what changed.

`policies.gandiva` makes one `Work` per call of `Gandiva.schedule` and hands it to its
mechanisms (time-slicing there, packing in `gandiva_packing`, migration and
grow-shrink in `gandiva_moves`). It starts from the snapshot's current allocations
(the "keep everything" plan) and its free pool, and each mechanism edits both
together, so that the pool is always what the plan leaves free. It is where Gandiva
asks the GPU-choice filter (controller.model.gpu_choice.candidates.GpuFilter, `chooser`):
`allows` before a job is given GPUs (a start, a victim's GPUs in a swap, a packed
share, a cleared node, a growth), `start` takes the GPUs with the job's pods' CPU
and memory and from its queue's room, and a job suspended gives them back.
"""

from __future__ import annotations

from controller.model import Allocation, JobSpec, JobView, Reason, Snapshot
from controller.model.catalog import gpu_util_of, resolve
from controller.model.gpu_choice.candidates import GpuFilter


class Work:
    """The round's editable plan; `touched` holds every job started or moved in it."""

    __slots__ = (
        "chooser",
        "migrations_left",
        "now",
        "pool",
        "reasons",
        "run",
        "share_unsized",
        "snapshot",
        "suspend",
        "touched",
    )

    def __init__(self, snapshot: Snapshot, *, share_unsized: bool, migrations: int) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now_s
        self.run: dict[str, Allocation] = snapshot.allocations()
        self.pool = snapshot.free_pool()
        self.chooser = GpuFilter(snapshot)
        self.share_unsized = share_unsized
        self.migrations_left = migrations
        # Ordered sets (dicts): iteration order must not depend on string hashing.
        self.touched: dict[str, None] = {}
        self.suspend: dict[str, None] = {}
        self.reasons: dict[str, Reason] = {}

    def settled(self, job: JobView) -> bool:
        """Running on the GPUs it had, untouched this round and past its (re)start."""
        return (
            job.allocation is not None
            and self.run.get(job.job_id) is job.allocation
            and job.job_id not in self.touched
            and job.resume_s <= self.now
        )

    def allows(self, job: JobView, alloc: Allocation) -> bool:
        """Whether the filter gives `alloc` to `job` from the pool as it is now, its
        queue's room included."""
        return self.chooser.refusal(self.pool, job, alloc) is None

    def start(self, job: JobView, alloc: Allocation) -> None:
        self.run[job.job_id] = self.chooser.take(self.pool, job, alloc)
        self.touched[job.job_id] = None

    def move(self, job: JobView, alloc: Allocation) -> None:
        """Give a running job other GPUs (a migration or resize: a restart)."""
        self.pool.release(self.run[job.job_id], job.spec.gpu_mem_mib)
        self.start(job, alloc)

    def swap(self, victim: JobView, job: JobView, reason: Reason) -> None:
        """Time-slice `victim` out and start `job` on the GPUs it held (whole GPUs:
        they go from one to the other, the pool's GPUs stay as they are; where nodes
        count CPU and memory, the victim's pods give theirs back and the job's take)."""
        given = self._suspended(victim, reason)
        if self.pool.tracks_host:
            self.pool.release(given, victim.spec.gpu_mem_mib)
            given = given.with_host(job.spec.host)
            self.pool.claim(given, job.spec.gpu_mem_mib)
        self.run[job.job_id] = given
        self.chooser.grant(job, given)
        self.touched[job.job_id] = None

    def swap_allowed(self, victim: JobView, job: JobView) -> bool:
        """Whether the filter gives `victim`'s GPUs to `job` once the victim's pods
        are gone."""
        alloc = self.run[victim.job_id]
        pool = self.pool
        if pool.tracks_host:
            pool = pool.copy()
            pool.release(alloc, victim.spec.gpu_mem_mib)
        return self.chooser.refusal(pool, job, alloc) is None

    def suspend_job(self, job: JobView, reason: Reason) -> None:
        """Time-slice a running job out: its state stays in host memory."""
        self.pool.release(self._suspended(job, reason), job.spec.gpu_mem_mib)

    def _suspended(self, job: JobView, reason: Reason) -> Allocation:
        """Mark a running job suspended for `reason`; the GPUs it gave up (to its
        queue's room too)."""
        self.chooser.release(job)
        self.suspend[job.job_id] = None
        self.touched[job.job_id] = None
        self.reasons[job.job_id] = reason
        return self.run.pop(job.job_id)


def gpu_util(spec: JobSpec) -> float:
    """GPU utilisation of the job alone, what packing is decided on: its own (a
    trace's, or measured live) where it has one, else the catalogue's."""
    return gpu_util_of(spec)


def mem_mib(spec: JobSpec, share_unsized: bool) -> int | None:
    """GPU memory the job needs on a shared GPU; None: it may not share."""
    if spec.gpu_mem_mib is not None:
        return spec.gpu_mem_mib
    return resolve(spec.model).mem_mib if share_unsized else None
