"""Admission, the check of a plan against the quotas, protection and reclaim
(controller.quotas, controller.checks) on hand-built rounds of 2x4 GPUs: what the
policy is shown, what of its plan stands, whom reclaim preempts and why."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from controller.checks import check_plan
from controller.model import Allocation, JobStatus, JobView, Plan, PlanError, Reason, Snapshot
from controller.model.gpu_choice.candidates import GpuFilter
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.placement import ConsolidatedPlacer
from controller.quotas.admission import DEFAULT_GRACE_S, Quotas
from controller.quotas.admitted import Admission
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_view

NOW_S = 1000.0
CLUSTER = make_cluster(nodes=2, gpus=4)


def tree(a_limit: int | None = None) -> QuotaTree:
    return QuotaTree(
        (
            QuotaNode("a", GpuQuota.of(4), None if a_limit is None else GpuQuota.of(a_limit)),
            QuotaNode("b", GpuQuota.of(4)),
        )
    )


def running(
    job_id: str, tenant: str, gpus: Sequence[tuple[int, int]], attained_gpu_s: float = 0.0
) -> JobView:
    spec = make_job(job_id, len(gpus), tenant=tenant, duration_s=10_000.0)
    return make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=Allocation.whole(gpus),
        now_s=NOW_S,
        attained_gpu_s=attained_gpu_s,
    )


def waiting(job_id: str, tenant: str, gpus: int, submit_s: float = 0.0) -> JobView:
    spec = make_job(job_id, gpus, tenant=tenant, submit_s=submit_s, duration_s=10_000.0)
    return make_view(spec, now_s=NOW_S)


def snapshot(*jobs: JobView) -> Snapshot:
    return Snapshot(NOW_S, CLUSTER, tuple(jobs), ConsolidatedPlacer(CLUSTER))


def node(n: int, *gpus: int) -> list[tuple[int, int]]:
    return [(n, g) for g in gpus]


def decide(quotas: Quotas, snap: Snapshot, policy: str = "fifo") -> Plan:
    """One round as controller.loop.Controller.decide runs it under test: the policy's
    plan must pass the check against the filter, quotas included."""
    adm = quotas.admit(snap)
    plan = make_policy(policy).schedule(adm.seen, None)
    return quotas.settle(adm, checked(snap, adm, plan, strict=True))


def checked(snap: Snapshot, adm: Admission, plan: Plan, *, strict: bool = False) -> Plan:
    """`plan` after the controller's check (controller.checks), live unless `strict`."""
    return check_plan(snap, plan, policy="test", strict=strict, quota=adm.seen.quota_room)


def codes(plan: Plan, snap: Snapshot) -> dict[str, str]:
    """Each job's fate: RUN, or the code of the reason it waits."""
    out = {}
    for job in snap.jobs:
        reason = plan.reason_for(job.job_id)
        out[job.job_id] = "RUN" if job.job_id in plan.run else (reason.code if reason else "?")
    return out


def test_idle_gpus_are_lent_past_the_guarantee() -> None:
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)), waiting("a2", "a", 2), waiting("a3", "a", 2)
    )
    plan = decide(Quotas(tree()), snap)
    assert codes(plan, snap) == {"a1": "RUN", "a2": "RUN", "a3": "RUN"}


def test_a_queue_under_its_guarantee_gets_borrowed_gpus_back() -> None:
    # a borrowed all 8 GPUs; b asks for 4, its guarantee. Least loss first: of a's
    # 2-GPU jobs, the two with the least attained service go.
    snap = snapshot(
        running("a1", "a", node(0, 0, 1), attained_gpu_s=300.0),
        running("a2", "a", node(0, 2, 3), attained_gpu_s=100.0),
        running("a3", "a", node(1, 0, 1), attained_gpu_s=200.0),
        running("a4", "a", node(1, 2, 3), attained_gpu_s=400.0),
        waiting("b1", "b", 2, submit_s=900.0),
        waiting("b2", "b", 2, submit_s=901.0),
    )
    plan = decide(Quotas(tree()), snap)
    assert codes(plan, snap) == {
        "a1": "RUN",
        "a2": "Reclaimed",
        "a3": "Reclaimed",
        "a4": "RUN",
        "b1": "ReclaimPending",
        "b2": "ReclaimPending",
    }
    assert plan.wake_s == NOW_S + DEFAULT_GRACE_S  # b starts once the grace period is over
    assert not plan.suspend  # graceful preemption: checkpoint, then restart


def test_nothing_is_reclaimed_from_a_queue_at_its_guarantee() -> None:
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)),
        running("b1", "b", node(1, 0, 1, 2, 3)),
        waiting("b2", "b", 1),
    )
    plan = decide(Quotas(tree()), snap)
    assert codes(plan, snap) == {"a1": "RUN", "b1": "RUN", "b2": "QueueOverShare"}


def test_a_limit_holds_a_queue_even_with_gpus_idle() -> None:
    snap = snapshot(running("a1", "a", node(0, 0, 1, 2, 3)), waiting("a2", "a", 1))
    plan = decide(Quotas(tree(a_limit=4)), snap)
    assert codes(plan, snap) == {"a1": "RUN", "a2": "QueueAtLimit"}
    assert "limit of 4 GPUs" in plan.reasons["a2"].message


def test_a_job_of_no_queue_waits_saying_so() -> None:
    snap = snapshot(waiting("x1", "nobody", 1))
    plan = decide(Quotas(tree()), snap)
    assert codes(plan, snap) == {"x1": "NoQueue"}
    assert "'nobody'" in plan.reasons["x1"].message


# a holds all 8 GPUs with four jobs (ids say their sizes; "one" has the least
# attained service of the two 1-GPU jobs); b waits for `wanted` GPUs, so a's share
# falls to 8 - wanted and exactly `wanted` GPUs may be reclaimed.
SIZES = (("one", 1), ("uno", 1), ("two", 2), ("four", 4))


@pytest.mark.parametrize(
    ("wanted", "victims"),
    [
        # The smallest job that covers the deficit, not the least-served one.
        (2, {"two"}),
        (4, {"four"}),
        # None that may go covers it (four would take a below its share): the
        # largest that may go, then the smallest that covers what is left.
        (3, {"two", "one"}),
        (1, {"one"}),
    ],
)
def test_reclaim_stops_as_few_gpus_as_cover_the_deficit(wanted: int, victims: set[str]) -> None:
    jobs: list[JobView] = []
    first = 0
    for k, (job_id, size) in enumerate(SIZES):
        place = [(g // 4, g % 4) for g in range(first, first + size)]
        jobs.append(running(job_id, "a", place, attained_gpu_s=float(k)))
        first += size
    jobs.append(waiting("b1", "b", wanted, submit_s=900.0))
    snap = snapshot(*jobs)
    plan = decide(Quotas(tree()), snap)
    got = {j for j, c in codes(plan, snap).items() if c == "Reclaimed"}
    assert got == victims
    assert codes(plan, snap)["b1"] == "ReclaimPending"


def test_the_check_catches_a_start_past_the_share() -> None:
    # A policy that ignores what it was shown: it starts a2, hidden, on idle GPUs
    # that b is owed. Under test the plan is refused; live a2 is held back.
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)), waiting("a2", "a", 2), waiting("b1", "b", 4)
    )
    quotas = Quotas(tree())
    adm = quotas.admit(snap)
    assert {j.job_id for j in adm.seen.waiting()} == {"b1"}
    rogue = Plan(
        run={"a1": Allocation.whole(node(0, 0, 1, 2, 3)), "a2": Allocation.whole(node(1, 0, 1))},
        default_reason=Reason("Test", "waits"),
    )
    with pytest.raises(PlanError, match="gave job a2 GPUs the filter refuses: quota a holds 4"):
        checked(snap, adm, rogue, strict=True)
    plan = quotas.settle(adm, checked(snap, adm, rogue))
    assert codes(plan, snap) == {"a1": "RUN", "a2": "QueueOverShare", "b1": "Test"}


def test_the_policy_may_not_preempt_a_queue_within_its_share_for_another() -> None:
    # b at its share; a policy preempts b1 to start a2 (a is at its share too).
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)),
        running("b1", "b", node(1, 0, 1, 2, 3)),
        waiting("a2", "a", 4),
    )
    quotas = Quotas(tree())
    adm = quotas.admit(snap)
    rogue = Plan(
        run={
            "a1": Allocation.whole(node(0, 0, 1, 2, 3)),
            "a2": Allocation.whole(node(1, 0, 1, 2, 3)),
        },
        default_reason=Reason("Test", "waits"),
    )
    plan = quotas.settle(adm, checked(snap, adm, rogue))
    assert codes(plan, snap)["b1"] == "RUN"
    assert codes(plan, snap)["a2"] in {"QueueOverShare", "ShareProtected"}
    assert plan.run["b1"] == Allocation.whole(node(1, 0, 1, 2, 3))


def test_a_queue_may_swap_its_own_jobs() -> None:
    # a (over its share, b has nothing) stops a1 for a2 of the same size: allowed.
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)),
        running("a3", "a", node(1, 0, 1, 2, 3)),
        waiting("a2", "a", 4),
    )
    quotas = Quotas(tree())
    adm = quotas.admit(snap)
    swap = Plan(
        run={
            "a3": Allocation.whole(node(1, 0, 1, 2, 3)),
            "a2": Allocation.whole(node(0, 0, 1, 2, 3)),
        },
        default_reason=Reason("Test", "waits"),
    )
    plan = quotas.settle(adm, checked(snap, adm, swap, strict=True))
    assert codes(plan, snap) == {"a1": "Test", "a2": "RUN", "a3": "RUN"}


def test_the_ledger_counts_reclaims_by_the_queue_they_hit() -> None:
    snap = snapshot(
        running("a1", "a", node(0, 0, 1, 2, 3)),
        running("a2", "a", node(1, 0, 1, 2, 3)),
        waiting("b1", "b", 4),
    )
    quotas = Quotas(tree(), record=True)
    decide(quotas, snap)
    assert quotas.ledger is not None
    assert quotas.ledger.reclaims == {"a": 1, "b": 0}
    (sample,) = quotas.ledger.samples
    assert sample.held_gpus == (4.0, 0.0)  # after the plan: one of a's jobs stopped
    assert sample.deserved_gpus == (4.0, 4.0)
    # Both have demand: a's preempted job and b's job wait, each for 4 GPUs.
    assert sample.backlogged == (True, True)


@pytest.mark.parametrize(
    ("b_holds", "fates"),
    [
        # b is 3 short of its 4: its 4-GPU gang leaves it 1 over, nearer than 3
        # under: its own, and it starts; a's 3-GPU gang (a 1 short) must borrow.
        (1, {"big": "RUN", "aw": "QueueOverShare"}),
        # b is 1 short: the gang would leave it 3 over, farther: it must borrow, and
        # the idle GPUs are owed to a's gang.
        (3, {"big": "QueueOverShare", "aw": "RUN"}),
    ],
)
def test_a_gang_past_the_share_is_the_queues_own_if_it_brings_it_nearer(
    b_holds: int, fates: dict[str, str]
) -> None:
    # 4 GPUs of node 0 held (a the rest of b's 4), node 1 idle.
    jobs = [running(f"a{k}", "a", [(0, k)]) for k in range(4 - b_holds)]
    jobs += [running(f"b{k}", "b", [(0, 4 - b_holds + k)]) for k in range(b_holds)]
    jobs += [waiting("big", "b", 4, submit_s=900.0), waiting("aw", "a", 3, 950.0)]
    snap = snapshot(*jobs)
    plan = decide(Quotas(tree()), snap)
    got = codes(plan, snap)
    assert {k: got[k] for k in fates} == fates


def test_a_queue_at_its_limit_may_swap_its_own_jobs() -> None:
    # a holds its limit of 4; the plan stops a1 for a2 of the same size: what it
    # released is no longer held when the limit is counted.
    snap = snapshot(running("a1", "a", node(0, 0, 1, 2, 3)), waiting("a2", "a", 4))
    quotas = Quotas(tree(a_limit=4))
    adm = quotas.admit(snap)
    swap = Plan(
        run={"a2": Allocation.whole(node(1, 0, 1, 2, 3))},
        default_reason=Reason("Test", "waits"),
    )
    plan = quotas.settle(adm, checked(snap, adm, swap, strict=True))
    assert codes(plan, snap) == {"a1": "Test", "a2": "RUN"}
    # Both at once pass the limit: the check refuses the start.
    both = Plan(run={"a1": snap.jobs[0].allocation, **swap.run}, default_reason=swap.default_reason)
    with pytest.raises(PlanError, match="quota a holds 4 of its limit of 4"):
        checked(snap, adm, both, strict=True)


def test_a_stop_taken_back_returns_the_room_only_if_nobody_used_it() -> None:
    # a (limit 4) holds 4 in a1; the plan stops a1, so a2 may take 4: then a1 cannot
    # be kept. Without a2's grant it can, and the room is a1's again.
    snap = snapshot(running("a1", "a", node(0, 0, 1, 2, 3)), waiting("a2", "a", 4))
    adm = Quotas(tree(a_limit=4)).admit(snap)
    a1, a2 = snap.jobs
    four = Allocation.whole(node(1, 0, 1, 2, 3))
    for granted in (True, False):
        chooser = GpuFilter(adm.seen)
        assert chooser.quota_refusal(a2, four) is not None  # a1 still holds the limit
        chooser.release(a1)
        assert chooser.quota_refusal(a2, four) is None
        if granted:
            chooser.grant(a2, four)
        assert chooser.keep(a1) is not granted
        refused = chooser.quota_refusal(a2, four)
        assert (refused is None) is granted, refused
