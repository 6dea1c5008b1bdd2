"""Node maintenance: an admin cordons, drains or uncordons a node.

One meaning everywhere, Kubernetes' own: a cordoned node takes no new GPUs (no
start, resume, migration or growth onto it) while the jobs on it run on; a drain
cordons the node and gracefully preempts every job holding a GPU there, so that
the policy places them elsewhere; an uncordon lets the node take work again.

The pool hides a cordoned node's free GPUs from every placer
(controller.model.pool.GpuPool.cordon), the GPU-choice filter refuses new GPUs there
to the policies that search GPUs themselves (controller.model.gpu_choice.candidates), and
after the policy controller.checks treats a plan that gives one as a policy's
defect; compile_plan refuses it too.
The simulator (controller.sim, replays and local mode) carries out
`MaintenanceEvent`s from a node schedule (controller.failures); the Kubernetes
operator reads the same states from the Node (operators/nodes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from controller.model import Reason


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
