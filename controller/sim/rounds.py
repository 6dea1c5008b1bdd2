"""Scheduling rounds in a simulation: the snapshot a policy decides on, the plan carried out.

`Rounds` is the `Backend` (controller.loop) that `Controller.decide` runs a round on:
`observe()` builds the `Snapshot` from the active jobs' cached views, `apply(plan)`
refuses an invalid plan before anything changes (PlanError, as the Kubernetes backend
does) and hands `compile_plan`'s actions to controller.sim.runs. After each round it
records a timeline sample (controller.sim.accounting) and keeps the reasons the plan
gave for every job left waiting; a job the plan refuses (`REFUSED`: deadline admission)
leaves at once, never to run. Called by controller.sim.simulator's loop when the
clock says a round is due; `Simulator.observe`/`apply` are the same two calls.
"""

from __future__ import annotations

from controller.actions import JobAction, compile_plan
from controller.loop import Controller
from controller.model import (
    JobStatus,
    JobView,
    Placer,
    Plan,
    PlanError,
    Reason,
    Snapshot,
    TypeRates,
)
from controller.model.job import REFUSED
from controller.placement import unallocatable_idle_gpus
from controller.sim.events import WAKE
from controller.sim.nodes import NodeStates
from controller.sim.parts import SimParts
from controller.sim.runs import JobRuns
from controller.sim.table import ActiveViews


class Rounds:
    """Runs rounds on the simulated cluster and remembers what the last one said."""

    __slots__ = (
        "accounts",
        "clock",
        "cluster",
        "config",
        "controller",
        "count",
        "default_reason",
        "events",
        "last_snapshot",
        "nodes",
        "placer",
        "pool",
        "reasons",
        "runs",
        "table",
        "type_rates",
    )

    def __init__(
        self,
        parts: SimParts,
        controller: Controller,
        placer: Placer,
        nodes: NodeStates,
        runs: JobRuns,
    ) -> None:
        self.controller = controller
        self.cluster = parts.cluster
        self.placer = placer
        self.config = parts.config
        self.clock = parts.clock
        self.events = parts.events
        self.table = parts.table
        self.pool = parts.pool
        self.nodes = nodes
        self.runs = runs
        self.accounts = parts.accounts
        # The jobs' speeds on each GPU type that the snapshot hands the policy.
        self.type_rates: TypeRates = parts.rates
        self.count = 0
        self.last_snapshot: Snapshot | None = None
        # Why each job left waiting waits, as the last plan (or a drain since) said.
        self.reasons: dict[str, Reason] = {}
        self.default_reason: Reason | None = None

    def run_round(self) -> None:
        self.count += 1
        now = self.clock.now_s
        self.accounts.expire_overheads(now)
        self.controller.decide(self)
        table = self.table
        self.accounts.sample(now, table.active, table.num_running, self._unallocatable())

    def observe(self) -> Snapshot:
        """The snapshot a policy decides on (Backend protocol)."""
        table = self.table
        table.refresh()
        generation = table.generation

        def waiting() -> tuple[JobView, ...]:
            # Read after the table moved on, it would mix rounds: refuse instead.
            if table.generation != generation:
                raise RuntimeError("a round's snapshot read for its waiting jobs too late")
            return tuple(table.views_wait.values())

        self.last_snapshot = Snapshot.deferred(
            waiting,
            len(table.views_wait),
            now_s=self.clock.now_s,
            cluster=self.cluster,
            placer=self.placer,
            down_nodes=frozenset(self.nodes.down),
            cordoned_nodes=frozenset(self.nodes.cordoned),
            pool=self.pool,
            running_jobs=tuple(table.views_run.values()),
            current=table.allocations,
            index=ActiveViews(table.views_run, table.views_wait),
            ordered=table.queues,
            type_rates=self.type_rates,
        )
        return self.last_snapshot

    def apply(self, plan: Plan) -> list[JobAction]:
        """Carry out a plan (Backend protocol): the actions `compile_plan` names, every
        stop before every start, gangs whole; an invalid plan changes nothing. Returns
        the actions."""
        snapshot = self.last_snapshot
        if snapshot is None:
            raise RuntimeError("apply before observe")
        if self.config.validate_reasons and plan.default_reason is None:
            unexplained = self.table.active.keys() - plan.run.keys() - plan.reasons.keys()
            if unexplained:
                job_id = min(unexplained)
                raise PlanError(f"{self.controller.policy.name}: job {job_id} waits, no reason")
        try:
            actions = compile_plan(snapshot, plan, self.pool)
        except PlanError as exc:
            raise PlanError(f"{self.controller.policy.name}: {exc}") from None
        self.runs.carry_out(actions)
        self._withdraw_refused(plan)
        if self.config.event_overhead:
            self.runs.charge_event(self.count, self.cluster.num_gpus)
        self.reasons = dict(plan.reasons)
        self.default_reason = plan.default_reason
        if plan.wake_s is not None and plan.wake_s > self.clock.now_s:
            self.events.push(plan.wake_s, WAKE, None)
        return actions

    def _withdraw_refused(self, plan: Plan) -> None:
        """Withdraw the waiting jobs the plan refuses (a reason of code REFUSED): they
        leave, never to run, with the reason as their outcome's `refused`."""
        active, now = self.table.active, self.clock.now_s
        for job_id, reason in plan.reasons.items():
            job = active.get(job_id)
            if reason.code != REFUSED or job is None or job_id in plan.run:
                continue
            if job.status is JobStatus.RUNNING:
                continue  # only a waiting job can be refused; a running one is stopped
            job.refused = reason.message
            job.status = JobStatus.CANCELLED
            self.table.touch(job)
            del active[job_id]
            self.accounts.leave(job, now)
            self.accounts.never_reasons[job_id] = reason

    def _unallocatable(self) -> int:
        """Idle whole GPUs that no job left waiting after the round could use (those
        the plan left waiting and those it stopped), from the smallest gang waiting."""
        if self.last_snapshot is None or self.pool.total_free == 0:
            return 0
        self.table.refresh()
        smallest = self.table.queues.smallest_gang()
        return unallocatable_idle_gpus(self.pool, self.cluster, [smallest] if smallest else [])
