"""SRTF: least remaining time holds the GPUs, preempting longer jobs."""

from __future__ import annotations

from controller.model import Action, Allocation, JobStatus, JobView, Snapshot
from controller.placement import ConsolidatedPlacer
from policies.srtf import Srtf
from tests.builders import make_cluster, make_job, make_view


def _snapshot(views: list[JobView], nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=100.0, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def test_a_shorter_job_preempts_a_longer_one() -> None:
    long = make_view(
        make_job("long", 4, duration_s=10_000),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole((0, g) for g in range(4)),
        now_s=100.0,
        done_iters=100.0,
    )
    short = make_view(make_job("short", 4, submit_s=90, duration_s=50))
    snap = _snapshot([long, short])
    plan = Srtf().schedule(snap, None)
    assert set(plan.run) == {"short"}
    assert plan.actions(snap) == {"long": Action.PREEMPT, "short": Action.START}


def test_remaining_not_total_time_decides() -> None:
    # "a" is long in total but nearly done; "b" is short but has not started.
    a = make_view(
        make_job("a", 4, duration_s=1000),
        status=JobStatus.PREEMPTED,
        done_iters=990.0,
        total_iters=1000.0,
        now_s=100.0,
    )
    b = make_view(make_job("b", 4, duration_s=50))
    plan = Srtf().schedule(_snapshot([a, b]), None)
    assert set(plan.run) == {"a"}


def test_skips_a_job_that_does_not_fit_and_runs_smaller_ones() -> None:
    big = make_view(make_job("big", 8, duration_s=10))  # larger than the cluster's free
    small = make_view(make_job("small", 2, duration_s=500))
    plan = Srtf().schedule(_snapshot([big, small]), None)
    assert set(plan.run) == {"small"}
    assert plan.reason_for("big") is not None
