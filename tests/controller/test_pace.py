"""controller.pace and a paced Controller: the policy is asked again only when the
world moved as it does at a replay's rounds, and in between the last plan is kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.actions import JobAction
from controller.loop import Controller
from controller.model import Allocation, GpuPool, JobStatus, JobView, Measured, Plan, Snapshot
from controller.pace import Pace
from controller.placement import ConsolidatedPlacer
from tests.builders import make_cluster, make_job, make_view

CLUSTER = make_cluster(nodes=1, gpus=4)
PLACER = ConsolidatedPlacer(CLUSTER)
POLICY, QUOTAS = object(), None


def running(job_id: str, gpus: list[int], gpus_asked: int | None = None) -> JobView:
    spec = make_job(job_id, gpus=gpus_asked or len(gpus))
    alloc = Allocation.whole((0, g) for g in gpus)
    return make_view(spec, status=JobStatus.RUNNING, allocation=alloc)


def waiting(job_id: str, gpus: int = 1) -> JobView:
    return make_view(make_job(job_id, gpus=gpus))


def snapshot(
    jobs: list[JobView], now_s: float = 0.0, held: tuple[int, ...] = (), **kw: Any
) -> Snapshot:
    """The cluster with `jobs`; GPUs in `held` are taken by pods that are leaving (the
    live backend's pool), not by any job."""
    pool = GpuPool.of_cluster(CLUSTER, frozenset(), frozenset())
    for j in jobs:
        if j.allocation is not None:
            pool.take(j.allocation, None)
    if held:
        pool.take(Allocation.whole((0, g) for g in held), None)
    return Snapshot(now_s, CLUSTER, tuple(jobs), PLACER, pool=pool, **kw)


def decided(before: Snapshot, plan: Plan) -> Pace:
    pace = Pace()
    pace.decided(before, plan, POLICY, QUOTAS)
    return pace


# Round 1: a runs on GPU 0, b waits; the plan starts b on GPUs 1-2 and asks to be
# woken at t=60.
A = running("a", [0])
B_PLACED = Allocation.whole([(0, 1), (0, 2)])
FIRST = snapshot([A, waiting("b", 2)])
PLAN = Plan(run={"a": A.allocation, "b": B_PLACED}, wake_s=60.0)  # type: ignore[dict-item]
AFTER = [A, replace(running("b", [1, 2]), allocation=B_PLACED)]


def test_not_due_when_the_world_is_what_the_plan_left() -> None:
    assert not decided(FIRST, PLAN).due(snapshot(AFTER, now_s=5.0), POLICY, QUOTAS)


def test_due_at_the_plans_wake() -> None:
    assert decided(FIRST, PLAN).due(snapshot(AFTER, now_s=60.0), POLICY, QUOTAS)


def test_due_when_a_job_arrives_or_leaves() -> None:
    pace = decided(FIRST, PLAN)
    assert pace.due(snapshot([*AFTER, waiting("c")], now_s=5.0), POLICY, QUOTAS)
    assert pace.due(snapshot(AFTER[1:], now_s=5.0), POLICY, QUOTAS)


def test_due_when_a_start_did_not_happen() -> None:
    """b still waits (its pods failed to start): the plan did not come true."""
    assert decided(FIRST, PLAN).due(snapshot([A, waiting("b", 2)], now_s=5.0), POLICY, QUOTAS)


def test_gpus_a_stop_frees_later_bring_no_round_but_others_do() -> None:
    """The plan preempted a (GPU 0): its pods hold the GPU a while, then free it, with no
    round (the plan decided with it free). A GPU nobody freed coming free is news."""
    plan = Plan(run={"b": B_PLACED})
    pace = decided(FIRST, plan)
    b = AFTER[1]
    leaving = snapshot([waiting("a"), b], now_s=1.0, held=(0,))
    gone = snapshot([waiting("a"), b], now_s=9.0)
    assert not pace.due(leaving, POLICY, QUOTAS)
    assert not pace.due(gone, POLICY, QUOTAS)
    # GPU 3 was held by a deleted job's pods when the plan was made; now it is free.
    held_first = snapshot([A, waiting("b", 2)], held=(3,))
    pace = decided(held_first, PLAN)
    assert not pace.due(snapshot(AFTER, now_s=5.0, held=(3,)), POLICY, QUOTAS)
    assert pace.due(snapshot(AFTER, now_s=6.0), POLICY, QUOTAS)


def test_due_on_a_jobs_first_report_and_on_node_changes() -> None:
    pace = decided(FIRST, PLAN)
    reported = replace(AFTER[1], measured=Measured(4.0, 10, 64, 2, 100.0))
    assert pace.due(snapshot([A, reported], now_s=5.0), POLICY, QUOTAS)
    assert pace.due(snapshot(AFTER, now_s=5.0, cordoned_nodes=frozenset({0})), POLICY, QUOTAS)


def test_due_after_a_policy_or_quota_switch() -> None:
    pace = decided(FIRST, PLAN)
    assert pace.due(snapshot(AFTER, now_s=5.0), object(), QUOTAS)
    assert pace.due(snapshot(AFTER, now_s=5.0), POLICY, object())


class Counting:
    """A policy that starts every waiting job on the first free GPUs, counting calls."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        self.calls += 1
        run = snapshot.allocations()
        pool = snapshot.free_pool()
        for job in snapshot.waiting():
            alloc = snapshot.placer.place(pool, job, job.spec.num_gpus)
            if alloc is not None:
                pool.take(alloc, None)
                run[job.job_id] = alloc
        return Plan(run=run, state=self.calls)


class Scripted:
    """A backend whose world moves only as the test says; it records the plans."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.applied: list[Plan] = []

    def observe(self) -> Snapshot:
        return self.snap

    def apply(self, plan: Plan) -> list[JobAction]:
        self.applied.append(plan)
        return []


def test_a_paced_controller_keeps_the_plan_until_the_world_moves() -> None:
    policy = Counting()
    controller = Controller(policy, paced=True)
    backend = Scripted(snapshot([A, waiting("b", 2)]))
    first = controller.decide(backend)
    assert policy.calls == 1 and set(first.run) == {"a", "b"}
    # The start came true: ten rounds on informer events ask nothing of the policy.
    b = replace(running("b", [1, 2]), allocation=first.run["b"])
    backend.snap = snapshot([A, b], now_s=1.0)
    for _ in range(10):
        kept = controller.decide(backend)
        assert kept.run == backend.snap.allocations() and kept.state == 1
    assert policy.calls == 1
    backend.snap = snapshot([A, b, waiting("c")], now_s=2.0)  # an arrival
    controller.decide(backend)
    assert policy.calls == 2
    unpaced = Counting()
    plain = Controller(unpaced)
    for _ in range(3):
        plain.decide(backend)
    assert unpaced.calls == 3
