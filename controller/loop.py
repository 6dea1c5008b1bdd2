"""The controller: one scheduling decision over any backend.

The simulator (controller.sim), the API's local mode (api/local_mode/backend.py) and the
Kubernetes operator (operators/) call `Controller.decide`: the simulator at each
scheduling round, the others from their reconcile loops, far more often, so they
make their Controller `paced` (controller.pace): the policy is asked only when the
world moved as it does at a replay's rounds, and the last plan is kept in between.
Every backend implements `Backend`: `observe()` builds the immutable snapshot of
what is running and waiting, `apply(plan)` carries the plan out gang by gang (or
raises PlanError for a plan that breaks the rules).

A round: with quotas (controller.quotas), their admission picks the jobs the policy
sees and hands it the round's quota figures; the plan is checked against the
GPU-choice filter the policies choose through (controller.checks: cordons, GPU
models, CPU and memory, and the quotas), a breach being a policy's defect; then the
quotas' settlement gives back what they decide between queues, and reclaims. The
policy, and the explicit state it carries from round to round, live here and nowhere
else, with the tally of what the plans did to each job (controller.tally), counted
alike on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from controller.actions import JobAction
from controller.checks import PlanDefects, check_plan
from controller.model import Plan, Policy, Snapshot, validate_plan
from controller.model.order import queue_order
from controller.pace import Pace
from controller.quotas.admission import Quotas
from controller.tally import DecisionTally


class Backend(Protocol):
    def observe(self) -> Snapshot:
        """The cluster and its active jobs now."""
        ...

    def apply(self, plan: Plan) -> Sequence[JobAction]:
        """Start, stop, resize and migrate jobs as the plan says, each gang whole;
        the actions carried out (controller.actions.compile_plan's)."""
        ...


class Controller:
    """Holds the policy and its state; `decide` runs one round on a backend."""

    def __init__(
        self,
        policy: Policy,
        *,
        check_plans: bool = False,
        quotas: Quotas | None = None,
        paced: bool = False,
    ) -> None:
        self.policy = policy
        # Queues' admission and reclaim around the policy (controller.quotas), if any.
        self.quotas = quotas
        self.state: Any = None
        self.check_plans = check_plans
        # Called with each round's snapshot and plan just before the backend applies it
        # (a backend may change what the snapshot refers to as it applies), e.g. to run
        # controller.decisions.record_round; None in replays.
        self.on_round: Callable[[Snapshot, Plan], None] | None = None
        # Live: decide only when a replay would (controller.pace); None decides always.
        self.pace = Pace() if paced else None
        self.last_plan: Plan | None = None
        # What each job's plans did to it, counted alike on every backend.
        self.tally = DecisionTally()
        # The plans' breaches of the GPU-choice filter held back (controller.checks).
        self.defects = PlanDefects()

    def set_policy(self, policy: Policy) -> None:
        """Switch policy; it starts from a fresh state at the next round."""
        self.policy = policy
        self.state = None
        if self.pace is not None:
            self.pace.forget()

    def decide(self, backend: Backend) -> Plan:
        snapshot = backend.observe()
        kept = self._kept(snapshot)
        if kept is not None:
            self.tally.add(backend.apply(kept))
            return kept
        admitted = None
        if self.quotas is not None:
            admitted = self.quotas.admit(snapshot, queue_order(self.policy, snapshot, self.state))
        plan = self.policy.schedule(snapshot if admitted is None else admitted.seen, self.state)
        plan = check_plan(
            snapshot,
            plan,
            policy=self.policy.name,
            strict=self.check_plans,
            defects=self.defects,
            quota=None if admitted is None else admitted.seen.quota_room,
        )
        if self.quotas is not None and admitted is not None:
            plan = self.quotas.settle(admitted, plan)
        if self.check_plans:
            validate_plan(snapshot, plan)  # the full invariants, for tests
        if self.on_round is not None:
            self.on_round(snapshot, plan)
        self.tally.add(backend.apply(plan))
        self.state = plan.state
        self.last_plan = plan
        if self.pace is not None:
            self.pace.decided(snapshot, plan, self.policy, self.quotas)
        return plan

    def _kept(self, snapshot: Snapshot) -> Plan | None:
        """The last plan, kept as it is (nothing starts, stops or changes), when the
        controller is paced and the snapshot does not call for the policy; else None."""
        last, pace = self.last_plan, self.pace
        if last is None or pace is None or pace.due(snapshot, self.policy, self.quotas):
            return None
        return Plan(
            run=snapshot.allocations(),
            reasons=last.reasons,
            default_reason=last.default_reason,
            state=self.state,
            wake_s=last.wake_s,
        )
