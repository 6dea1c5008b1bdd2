"""What one scheduling round decided, for people: queue positions and who took whose GPUs.

`Controller.decide` (controller.loop) hands each round, before the backend applies
it, to its `on_round` observer when one is set: local mode's LiveCluster (controller.live) and the
operator (operators/backend.py) call `record_round` there, so that the API can show a
waiting job's position in the policy's order (controller.model.order) and, for a job
the plan stopped, shrank or moved, the jobs that received its GPUs in the same round.
Replays set no observer and pay nothing.

Cost: the positions sort the active jobs once (the policy's `queue_order`); the
displacements look only at the jobs the plan changes (`actions.plan_diff`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.actions import plan_diff
from controller.model import Action, Allocation, Plan, Policy, Reason, Snapshot, classify_change
from controller.model.order import positions, queue_order


@dataclass(frozen=True, slots=True)
class Displacement:
    """A running job the round stopped, shrank or moved, and why."""

    job_id: str
    action: Action  # PREEMPT, SUSPEND, RESIZE, MIGRATE or RESHARE
    by: tuple[str, ...]  # ids of the jobs given GPUs it held (none: nobody took them)
    reason: Reason | None  # the plan's reason for a job it left waiting
    at_s: float


@dataclass(frozen=True, slots=True)
class RoundRecord:
    at_s: float
    positions: Mapping[str, int]  # job left waiting -> 1-based position in policy order
    displaced: Mapping[str, Displacement]


def record_round(policy: Policy, snapshot: Snapshot, plan: Plan, state: Any) -> RoundRecord:
    """The round's record: `plan` was made by `policy` from `snapshot` and applied;
    `state` is the state it handed on (`Plan.state`)."""
    waiting = {j.job_id for j in snapshot.jobs if j.job_id not in plan.run}
    order = queue_order(policy, snapshot, state) if waiting else []
    return RoundRecord(snapshot.now_s, positions(order, waiting), displacements(snapshot, plan))


def displacements(snapshot: Snapshot, plan: Plan) -> dict[str, Displacement]:
    """Each running job that loses GPUs in `plan` (stopped, shrunk or moved), with the
    jobs that are given those GPUs in the same plan: who preempted whom."""
    assert snapshot.current is not None
    changed, stopped = plan_diff(plan.run, snapshot.current)
    gainers: dict[tuple[int, int], list[str]] = {}
    losers: list[tuple[str, Allocation | None]] = [(j, None) for j in stopped]
    for job_id in changed:
        given = plan.run[job_id]
        held = snapshot.current.get(job_id)
        before = set(held.gpus()) if held is not None else set()
        for gpu in given.gpus():
            if gpu not in before:
                gainers.setdefault(gpu, []).append(job_id)
        if held is not None:
            losers.append((job_id, given))
    out: dict[str, Displacement] = {}
    for job_id, target in losers:
        job = snapshot.job(job_id)
        had = snapshot.current.get(job_id)
        if job is None or had is None:
            continue
        lost = set(had.gpus()) - (set(target.gpus()) if target is not None else set())
        action = classify_change(job, target, plan.batch_sizes.get(job_id), job_id in plan.suspend)
        if not lost or action is None:
            continue
        by = sorted({g for gpu in lost for g in gainers.get(gpu, ()) if g != job_id})
        reason = plan.reason_for(job_id) if target is None else None
        out[job_id] = Displacement(job_id, action, tuple(by), reason, snapshot.now_s)
    return out
