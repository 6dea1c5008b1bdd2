"""Queue order: the order in which a policy would serve the jobs that wait.

A policy may define `queue_order(snapshot, state)`: every active job of the snapshot,
first served first, by the policy's own rule (FIFO: priority then submission; SRTF:
remaining time; Tiresias: queue, then time in it; ...). The controller's round record
(controller.decisions) reads it through `queue_order` below, after the round, with the
state the policy handed on, and numbers the jobs left waiting 1, 2, ... in that order:
the positions the API and the operator report. A policy without the method is served
in submission order.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from controller.model.snapshot import Policy, Snapshot


@runtime_checkable
class QueueOrdering(Protocol):
    """A policy that says in which order it serves the active jobs."""

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """The ids of the snapshot's active jobs, first served first. `state` is the
        policy's state after the round (`Plan.state`); running jobs are ranked as if
        they waited from now, so that a job stopped this round takes its place."""
        ...


def submission_order(snapshot: Snapshot) -> list[str]:
    """The active jobs by submit time, then id: the default order."""
    jobs = sorted(snapshot.jobs, key=lambda j: (j.spec.submit_s, j.job_id))
    return [j.job_id for j in jobs]


def queue_order(policy: Policy, snapshot: Snapshot, state: Any) -> list[str]:
    """`policy`'s order of the active jobs, or submission order if it defines none."""
    if isinstance(policy, QueueOrdering):
        return policy.queue_order(snapshot, state)
    return submission_order(snapshot)


def positions(order: list[str], waiting: set[str]) -> dict[str, int]:
    """1-based positions of the `waiting` jobs along `order` (others skipped)."""
    out: dict[str, int] = {}
    for job_id in order:
        if job_id in waiting:
            out[job_id] = len(out) + 1
    return out
