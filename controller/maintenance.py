"""Node maintenance: an admin cordons, drains or uncordons a node.

One meaning everywhere, Kubernetes' own: a cordoned node takes no new GPUs (no
start, resume, migration or growth onto it) while the jobs on it run on; a drain
cordons the node and gracefully preempts every job holding a GPU there, so that
the policy places them elsewhere; an uncordon lets the node take work again.

The pool hides a cordoned node's free GPUs from every placer
(controller.model.pool.GpuPool.cordon) and compile_plan refuses a plan that
gives a new GPU there. `fence_plan`, called by controller.loop.Controller between
the policy and the backend, turns a plan that would anyway (a policy that packs a
job next to one already on the node) into a valid one: that job waits, or stops.
The simulator (controller.sim, replays and local mode) carries out
`MaintenanceEvent`s from a node schedule (controller.failures); the Kubernetes
operator reads the same states from the Node (operators/nodes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from controller.actions import plan_diff
from controller.model import Plan, Reason, Snapshot
from controller.model.snapshot import new_gpu_on_cordoned
from controller.placement.resources import fence_resources


class NodeAction(Enum):
    CORDON = "cordon"
    DRAIN = "drain"
    UNCORDON = "uncordon"


@dataclass(frozen=True, slots=True)
class MaintenanceEvent:
    """An admin's `action` on `node` at `time_s` (in a replay's node schedule)."""

    time_s: float
    node: str
    action: NodeAction
    by: str = "schedule"


def drained_reason(node: str, by: str) -> Reason:
    """Why a job that a drain preempted waits (until the next round places it)."""
    return Reason("NodeDrained", f"preempted: node {node} drained by {by}")


def fence_plan(snapshot: Snapshot, plan: Plan) -> Plan:
    """`plan` without the new GPUs it gives on cordoned nodes: such a job stays
    waiting, or stops if it runs, with a reason naming the node. Other jobs are
    unchanged, so a valid plan stays valid (only GPUs are given back). Starts whose
    pods' CPU or memory do not fit are held back the same way (`fence_resources`)."""
    plan = fence_resources(snapshot, plan)
    if not snapshot.cordoned_nodes:
        return plan
    assert snapshot.current is not None
    changed, _ = plan_diff(plan.run, snapshot.current)
    refused: dict[str, Reason] = {}
    for job_id in changed:
        job = snapshot.job(job_id)
        if job is None:
            continue  # compile_plan names the unknown job
        node = new_gpu_on_cordoned(snapshot, job, plan.run[job_id])
        if node is not None:
            name = snapshot.cluster.nodes[node].name
            refused[job_id] = Reason("NodeCordoned", f"node {name} is cordoned: no new work")
    if not refused:
        return plan
    run = {k: v for k, v in plan.run.items() if k not in refused}
    return Plan(
        run=run,
        reasons={**plan.reasons, **refused},
        default_reason=plan.default_reason,
        suspend=plan.suspend,
        batch_sizes=plan.batch_sizes,
        state=plan.state,
        wake_s=plan.wake_s,
    )
