"""After the policy: its plan checked against the GPU-choice filter, and waits explained.

Called by controller.loop.Controller.decide between the policy and the quotas'
settlement (or the backend, without quotas). Policies choose GPUs through the filter
(controller.model.gpu_choice.candidates): cordoned nodes, GPU models a job refuses and nodes
without the CPU or memory for its pod are refused where GPUs are chosen, and so is a
start or growth beyond what the job's queue allows (controller.model.quotas.room). A
plan that still gives such GPUs is a defect of the policy, not a plan to repair:
`check_plan` raises PlanError where
plans are checked (replays under test: `Controller(check_plans=True)`), and
otherwise (a live controller, a replay run from the CLI) holds each such job back
with the filter's reason (`hold_back`: it keeps the GPUs it holds where nobody took
them, else waits or stops, as the fences that came before did), logs the defect and
counts it in `PlanDefects`, so that no pod is started that cannot run.

`explain_host_waits` is no check: a waiting job whose GPUs some node has free, but
no such node its pod's CPU or memory, says so (WaitingForResources) instead of the
policy's reason, which speaks of GPUs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from controller.actions import plan_diff
from controller.model import (
    NO_HOST,
    Allocation,
    GpuPool,
    HostRequest,
    Plan,
    PlanError,
    Reason,
    Snapshot,
)
from controller.model.gpu_choice.candidates import (
    WAITING_FOR_RESOURCES,
    gpu_takers,
    plan_refusals,
    shortfall,
)
from controller.model.quotas.room import QuotaRoom

log = logging.getLogger(__name__)


@dataclass
class PlanDefects:
    """The plans' breaches of the filter a live controller held back, by reason code
    and by policy: each one a policy's defect to fix. `fresh` holds the (policy,
    reason code) of those not yet read by `drain` (the operator's metrics read them
    after each round: operators.metrics.OperatorMetrics.count_defects)."""

    by_reason: Counter[str] = field(default_factory=Counter)
    by_policy: Counter[str] = field(default_factory=Counter)
    fresh: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def add(self, policy: str, code: str) -> None:
        self.by_reason[code] += 1
        self.by_policy[policy] += 1
        self.fresh.append((policy, code))

    def drain(self) -> list[tuple[str, str]]:
        """The (policy, reason code) of each defect since the last call."""
        out, self.fresh = self.fresh, []
        return out


def check_plan(
    snapshot: Snapshot,
    plan: Plan,
    *,
    policy: str,
    strict: bool,
    defects: PlanDefects | None = None,
    quota: QuotaRoom | None = None,
) -> Plan:
    """`plan` checked against the filter (with `quota`, the round's quota figures, its
    quota half too): raises PlanError for the first job it gives GPUs the filter
    refuses when `strict`; else those jobs are held back with the filter's reason
    (`hold_back`; the defect logged and counted in `defects`). Then the waits of
    `explain_host_waits`. Unchanged when nothing is refused or explained."""
    assert snapshot.current is not None
    changed, stopped = plan_diff(plan.run, snapshot.current)
    refused = plan_refusals(snapshot, plan.run, changed, stopped, quota)
    if refused and strict:
        job_id = min(refused)
        raise PlanError(
            f"policy {policy} gave job {job_id} GPUs the filter refuses: {refused[job_id].message}"
        )
    for job_id, why in sorted(refused.items()):
        log.error("policy %s: defect: job %s held back: %s", policy, job_id, why.message)
        if defects is not None:
            defects.add(policy, why.code)
    run: Mapping[str, Allocation] = plan.run
    reasons = dict(plan.reasons)
    if refused:
        run = hold_back(plan.run, reasons, refused, snapshot.current)
    held = explain_host_waits(snapshot, run)
    if not refused and not held:
        return plan
    return replace(plan, run=run, reasons={**reasons, **held})


def hold_back(
    run: Mapping[str, Allocation],
    reasons: dict[str, Reason],
    refused: Mapping[str, Reason],
    current: Mapping[str, Allocation],
) -> dict[str, Allocation]:
    """`run` without what it gives the jobs in `refused`: each back to the GPUs it holds
    if no other job of the plan took one of them, else out of the plan (it stops, or
    stays waiting, with its reason added to `reasons`)."""
    out = dict(run)
    taken = gpu_takers(out)
    for job_id in sorted(refused):
        before = current.get(job_id)
        if before is not None and all(taken.get(g, set()) <= {job_id} for g in before.gpus()):
            out[job_id] = before
            continue
        del out[job_id]
        reasons[job_id] = refused[job_id]
    return out


def explain_host_waits(snapshot: Snapshot, run: Mapping[str, Allocation]) -> dict[str, Reason]:
    """Waiting jobs (pods asking CPU or memory) for which some node of an accepted GPU
    model has the GPUs free once `run` holds its GPUs, but none of those the pod's CPU
    or memory: why they wait. Empty when no node states its CPU or memory."""
    if snapshot.pool is not None and not snapshot.pool.tracks_host:
        return {}  # without copying the pool, as most replays' every round
    if not any(j.spec.host != NO_HOST and j.job_id not in run for j in snapshot.waiting()):
        return {}
    pool = _after(snapshot, run)
    if not pool.tracks_host:
        return {}
    out: dict[str, Reason] = {}
    seen: dict[tuple[int, HostRequest, frozenset[str]], str | None] = {}
    for job in snapshot.waiting():
        spec = job.spec
        if spec.host == NO_HOST or job.job_id in run:
            continue
        key = (spec.min_gpus, spec.host, spec.gpu_models)
        if key not in seen:
            roomy = [
                n
                for n in range(pool.num_nodes)
                if len(pool.free_gpus(n)) >= spec.min_gpus
                and spec.accepts(snapshot.cluster.nodes[n].gpu_type.name)
            ]
            seen[key] = None
            if roomy and not any(pool.host_fits(n, spec.host) for n in roomy):
                node = max(roomy, key=lambda n: _free_cpu(pool, n))
                seen[key] = shortfall(snapshot, pool, node, spec.host)
        why = seen[key]
        if why is not None:
            out[job.job_id] = Reason(WAITING_FOR_RESOURCES, why)
    return out


def _after(snapshot: Snapshot, run: Mapping[str, Allocation]) -> GpuPool:
    """The free capacity once the plan `run` is carried out (what it cannot take is
    left for compile_plan to refuse)."""
    assert snapshot.current is not None
    pool = snapshot.free_pool()
    changed, stopped = plan_diff(run, snapshot.current)
    for job_id in (*stopped, *changed):
        job = snapshot.job(job_id)
        if job is not None and job.allocation is not None:
            pool.release(job.allocation, job.spec.gpu_mem_mib)
    for job_id in changed:
        job = snapshot.job(job_id)
        if job is None:
            continue
        alloc = run[job_id].with_host(job.spec.host)
        if pool.fits(alloc, job.spec.gpu_mem_mib):
            pool.take(alloc, job.spec.gpu_mem_mib)
    return pool


def _free_cpu(pool: GpuPool, node: int) -> int:
    free = pool.host_free(node)
    return 0 if free is None else free.cpu_milli
