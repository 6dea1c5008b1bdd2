"""The nodes in a simulation: failures and recoveries, cordons, drains and uncordons.

controller.sim.simulator hands node events from the schedule (`SimConfig.failures`)
and admins' maintenance (`Simulator.maintain`) to `NodeStates`. A failed node kills
its jobs: they roll back to their last checkpoint (taken every
`checkpoint_interval_s` of running time) and wait to restart; its GPUs leave the
capacity until it comes back. A cordoned node takes no new GPUs while its jobs run
on; a drain cordons it and preempts its jobs gracefully (progress kept).
"""

from __future__ import annotations

from controller.maintenance import NodeAction
from controller.model import JobStatus
from controller.sim.job import SimJob
from controller.sim.parts import SimParts
from controller.sim.runs import JobRuns


class NodeStates:
    """Which nodes are down and which cordoned, kept in step with the pool."""

    __slots__ = ("accounts", "cluster", "cordoned", "down", "pool", "runs", "table")

    def __init__(self, parts: SimParts, runs: JobRuns) -> None:
        self.cluster = parts.cluster
        self.pool = parts.pool
        self.table = parts.table
        self.accounts = parts.accounts
        self.runs = runs
        self.down: set[int] = set()
        self.cordoned: set[int] = set()

    def fail(self, node: int) -> None:
        """The node goes down (if up): its jobs roll back to their checkpoints."""
        if node in self.down:
            return
        for job in self.jobs_on(node):
            self.runs.stop(job, JobStatus.PREEMPTED, failed=True)
        self.down.add(node)
        self.accounts.alive_gpus -= self.cluster.nodes[node].num_gpus
        self.pool.node_down(node)

    def recover(self, node: int) -> None:
        """The node comes back (if down), with all its GPUs free."""
        if node not in self.down:
            return
        num_gpus = self.cluster.nodes[node].num_gpus
        self.down.discard(node)
        self.accounts.alive_gpus += num_gpus
        self.pool.node_up(node, num_gpus)

    def maintain(self, node: int, action: NodeAction) -> list[SimJob]:
        """Cordon, drain or uncordon; the jobs a drain preempted, by id."""
        if action is NodeAction.UNCORDON:
            self.cordoned.discard(node)
            self.pool.uncordon(node)
        else:
            self.cordoned.add(node)
            self.pool.cordon(node)
        if action is not NodeAction.DRAIN:
            return []
        preempted = self.jobs_on(node)
        for job in preempted:
            self.runs.stop(job, JobStatus.PREEMPTED)
        return preempted

    def jobs_on(self, node: int) -> list[SimJob]:
        """The jobs running on a node, by id."""
        jobs = sorted(self.table.active.values(), key=lambda j: j.spec.job_id)
        return [j for j in jobs if j.allocation is not None and node in j.allocation.nodes]
