"""FIFO: submission order, gangs whole, no preemption, head-of-line blocking."""

from __future__ import annotations

from controller.model import Allocation, JobStatus, JobView, Snapshot
from controller.placement import ConsolidatedPlacer
from policies.fifo import Fifo
from tests.builders import make_cluster, make_job, make_view


def _snapshot(views: list[JobView], nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=0.0, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def test_starts_in_submission_order_until_the_head_does_not_fit() -> None:
    a = make_view(make_job("a", 2, submit_s=1))
    b = make_view(make_job("b", 4, submit_s=2))  # does not fit after a
    c = make_view(make_job("c", 1, submit_s=3))  # would fit, but FIFO blocks
    plan = Fifo().schedule(_snapshot([c, b, a]), None)
    assert set(plan.run) == {"a"}
    assert plan.reason_for("b") is not None and plan.reason_for("b").code == "InsufficientGpus"
    reason_c = plan.reason_for("c")
    assert reason_c is not None and reason_c.code == "QueuedBehind" and "b" in reason_c.message


def test_backfill_lets_smaller_jobs_past_a_blocked_head() -> None:
    a = make_view(make_job("a", 2, submit_s=1))
    b = make_view(make_job("b", 4, submit_s=2))
    c = make_view(make_job("c", 1, submit_s=3))
    plan = Fifo(backfill=True).schedule(_snapshot([a, b, c]), None)
    assert set(plan.run) == {"a", "c"}


def test_never_preempts_a_running_job() -> None:
    running = make_view(
        make_job("old", 4, submit_s=5),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole((0, g) for g in range(4)),
    )
    urgent = make_view(make_job("new", 4, submit_s=0, priority=10))
    plan = Fifo().schedule(_snapshot([running, urgent]), None)
    assert plan.run["old"] == running.allocation
    assert "new" not in plan.run


def test_priority_goes_first_then_submit_time_then_id() -> None:
    low = make_view(make_job("low", 4, submit_s=0))
    high = make_view(make_job("high", 4, submit_s=9, priority=1))
    plan = Fifo().schedule(_snapshot([low, high]), None)
    assert set(plan.run) == {"high"}
    x = make_view(make_job("x", 4, submit_s=3))
    w = make_view(make_job("w", 4, submit_s=3))
    assert set(Fifo().schedule(_snapshot([x, w]), None).run) == {"w"}


def test_gang_spans_nodes_whole() -> None:
    job = make_view(make_job("big", 8))
    plan = Fifo().schedule(_snapshot([job], nodes=3, gpus=4), None)
    assert plan.run["big"].num_gpus == 8
    assert len(plan.run["big"].nodes) == 2
