"""Queue order per policy (controller.model.order) and the round record
(controller.decisions): positions of the jobs left waiting, and who took whose GPUs."""

from __future__ import annotations

import pytest

from controller.decisions import displacements, record_round
from controller.model import Action, Allocation, JobStatus, JobView, Plan, Snapshot
from controller.model.order import positions, queue_order, submission_order
from controller.placement import ConsolidatedPlacer
from policies.fifo import Fifo
from policies.gandiva import Gandiva
from policies.optimus import Optimus
from policies.pollux import Pollux
from policies.registry import make_policy, policy_names
from policies.srtf import Srtf
from policies.tiresias import Promotion, Tiresias, TiresiasState
from tests.builders import make_cluster, make_job, make_view

NOW_S = 1000.0


def _snapshot(views: list[JobView], nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=NOW_S, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def _gpus(node: int, first: int, n: int) -> Allocation:
    return Allocation.whole((node, g) for g in range(first, first + n))


def test_fifo_orders_by_priority_then_submission() -> None:
    views = [
        make_view(make_job("b", submit_s=20)),
        make_view(make_job("a", submit_s=10)),
        make_view(make_job("urgent", submit_s=30, priority=5)),
        make_view(make_job("c", submit_s=20)),
    ]
    assert Fifo().queue_order(_snapshot(views), None) == ["urgent", "a", "b", "c"]


def test_srtf_orders_by_remaining_time() -> None:
    views = [
        make_view(make_job("long", submit_s=0, duration_s=900)),
        make_view(make_job("short", submit_s=50, duration_s=100)),
        # half done: 200 s left of 400
        make_view(make_job("half", submit_s=10, duration_s=400), done_iters=200.0),
        make_view(make_job("tie", submit_s=60, duration_s=100)),
    ]
    assert Srtf().queue_order(_snapshot(views), None) == ["short", "tie", "half", "long"]


def test_tiresias_orders_by_queue_then_arrival_in_it() -> None:
    t = Tiresias(thresholds_gpu_s=(100.0,))
    views = [
        make_view(make_job("q1-early", submit_s=0), status=JobStatus.PREEMPTED, attained_gpu_s=500),
        make_view(make_job("q1-late", submit_s=5), status=JobStatus.PREEMPTED, attained_gpu_s=200),
        make_view(make_job("q0-late", submit_s=40)),
        make_view(make_job("q0-early", submit_s=30), status=JobStatus.PREEMPTED, attained_gpu_s=50),
    ]
    # q1-late entered Q1 before q1-early did (the state's entry times).
    state = TiresiasState(entered={"q1-early": (1, 300.0), "q1-late": (1, 200.0)})
    assert t.queue_order(_snapshot(views), state) == ["q0-early", "q0-late", "q1-late", "q1-early"]


def test_tiresias_counts_a_promotion_as_back_in_q0() -> None:
    t = Tiresias(thresholds_gpu_s=(100.0,))
    views = [
        make_view(make_job("fresh", submit_s=500)),
        make_view(make_job("starved", submit_s=0), status=JobStatus.PREEMPTED, attained_gpu_s=800),
    ]
    promoted = TiresiasState(promotions={"starved": Promotion(400.0, 800.0, 100.0)})
    assert t.queue_order(_snapshot(views), TiresiasState()) == ["fresh", "starved"]
    assert t.queue_order(_snapshot(views), promoted) == ["starved", "fresh"]


def test_gandiva_serves_the_longest_waiting_first_and_a_running_job_last() -> None:
    views = [
        make_view(make_job("recent", submit_s=0), waiting_since_s=300.0),
        make_view(make_job("old", submit_s=100), waiting_since_s=100.0),
        make_view(
            make_job("runs", submit_s=0), status=JobStatus.RUNNING, allocation=_gpus(0, 0, 1)
        ),
    ]
    assert Gandiva().queue_order(_snapshot(views), None) == ["old", "recent", "runs"]


def test_pollux_orders_by_attained_service() -> None:
    views = [
        make_view(make_job("much", submit_s=0), status=JobStatus.PREEMPTED, attained_gpu_s=900),
        make_view(make_job("none", submit_s=50)),
        make_view(make_job("some", submit_s=0), status=JobStatus.PREEMPTED, attained_gpu_s=10),
    ]
    assert Pollux().queue_order(_snapshot(views), None) == ["none", "some", "much"]


@pytest.mark.parametrize(("admission", "expected"), [("arrival", ["first", "second"])])
def test_optimus_admits_in_submission_order(admission: str, expected: list[str]) -> None:
    views = [
        make_view(make_job("second", submit_s=10, duration_s=10)),
        make_view(make_job("first", submit_s=0, duration_s=10_000)),
    ]
    assert Optimus(admission=admission).queue_order(_snapshot(views), None) == expected


def test_optimus_by_remaining_puts_the_shorter_estimate_first() -> None:
    # Without a loss fit a job's remaining work is the prior's or its work done, if more.
    views = [
        make_view(
            make_job("far", submit_s=0, duration_s=1e6),
            status=JobStatus.PREEMPTED,
            done_iters=5e5,
            total_iters=1e6,
        ),
        make_view(make_job("new", submit_s=10, duration_s=100)),
    ]
    assert Optimus(admission="remaining").queue_order(_snapshot(views), None) == ["new", "far"]


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_orders_every_active_job_once(name: str) -> None:
    views = [
        make_view(make_job(f"j{i}", 1 + i % 2, submit_s=float(i)), waiting_since_s=float(i))
        for i in range(6)
    ]
    snap = _snapshot(views, nodes=2)
    policy = make_policy(name)
    plan = policy.schedule(snap, None)
    order = queue_order(policy, snap, plan.state)
    assert sorted(order) == sorted(v.job_id for v in views)
    record = record_round(policy, snap, plan, plan.state)
    left = {v.job_id for v in views} - set(plan.run)
    assert sorted(record.positions.values()) == list(range(1, len(left) + 1))
    assert set(record.positions) == left


def test_positions_number_the_waiting_along_the_order() -> None:
    assert positions(["a", "b", "c", "d"], {"d", "b"}) == {"b": 1, "d": 2}


def test_a_policy_without_an_order_serves_in_submission_order() -> None:
    class Plain:
        name = "plain"

        def schedule(self, snapshot: Snapshot, state: object) -> Plan:
            return Plan(run={})

    views = [make_view(make_job("late", submit_s=9)), make_view(make_job("early", submit_s=1))]
    snap = _snapshot(views)
    assert queue_order(Plain(), snap, None) == submission_order(snap) == ["early", "late"]


def test_srtf_preemption_records_who_took_the_gpus() -> None:
    long = make_view(
        make_job("long", 4, duration_s=10_000, tenant="a"),
        status=JobStatus.RUNNING,
        allocation=_gpus(0, 0, 4),
        now_s=NOW_S,
    )
    waits = make_view(make_job("other", 4, submit_s=80, duration_s=5000))
    short = make_view(make_job("short", 4, submit_s=90, duration_s=50, tenant="b"))
    snap = _snapshot([long, waits, short])
    plan = Srtf().schedule(snap, None)
    assert set(plan.run) == {"short"}
    record = record_round(Srtf(), snap, plan, plan.state)
    gone = record.displaced["long"]
    assert (gone.action, gone.by) == (Action.PREEMPT, ("short",))
    assert gone.reason is not None and gone.reason.code == "ShorterJobsFirst"
    # Remaining time: other (5000 s) before long (10,000 s).
    assert record.positions == {"other": 1, "long": 2}


def test_a_shrink_names_the_job_that_got_the_gpus_and_a_stop_nobody_took_names_none() -> None:
    elastic = make_view(
        make_job("elastic", 4, min_gpus=2, max_gpus=4),
        status=JobStatus.RUNNING,
        allocation=_gpus(0, 0, 4),
    )
    idle = make_view(make_job("idle", 2), status=JobStatus.RUNNING, allocation=_gpus(1, 0, 2))
    newcomer = make_view(make_job("new", 2))
    snap = _snapshot([elastic, idle, newcomer], nodes=2)
    plan = Plan(run={"elastic": _gpus(0, 0, 2), "new": _gpus(0, 2, 2)}, default_reason=None)
    found = displacements(snap, plan)
    assert found["elastic"].action is Action.RESIZE
    assert found["elastic"].by == ("new",)
    assert found["idle"].action is Action.PREEMPT and found["idle"].by == ()
    assert "new" not in found
