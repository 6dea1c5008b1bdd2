"""Jobs larger than any one GPU type under Gavel's policies (policies/gavel/across.py,
issue 31): the span over types, the LPs holding its parts in proportion, and a round
that runs it over both types where the rest of Gavel's rule would leave it waiting."""

from __future__ import annotations

import numpy as np
import pytest

from controller.model import GpuType, JobStatus, Snapshot
from controller.placement import ConsolidatedPlacer
from policies.gavel import across
from policies.gavel import allocation as alloc
from policies.registry import make_policy
from tests.builders import make_job, make_typed_cluster, make_view

SLOW = GpuType("SLOW-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=0.5)
FAST = GpuType("FAST-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=2.0)


def test_a_span_takes_the_fastest_types_first_and_runs_at_the_slowest_parts_pace() -> None:
    """6 GPUs over types of 4 (slow, 1 step/s per GPU) and 4 (fast, 3 per GPU): all 4
    fast ones, then 2 slow; 6 GPUs at the slow part's 1 per GPU."""
    per_gpu = {"slow": 1.0, "fast": 3.0}

    def rate_of(gpu: str, n: int) -> float | None:
        return per_gpu[gpu] * n if n <= 4 else None

    parts = across.span(6, ["slow", "fast"], [4, 4], rate_of)
    assert parts == (2, 4)
    assert across.spanned_rate(parts, ["slow", "fast"], rate_of) == pytest.approx(6.0)
    assert across.span(9, ["slow", "fast"], [4, 4], rate_of) == ()


@pytest.mark.parametrize("aware", [True, False])
def test_las_keeps_a_spanned_jobs_parts_in_proportion(aware: bool) -> None:
    """Job 0 spans 2 slow + 4 fast GPUs of 4 + 4; job 1 asks 2 of either. Without the
    ties the LP could give job 0 fast time alone; with them X[0] = X_a (2/6, 4/6) and
    its GPUs (2 X_a, 4 X_a) with job 1's fit each type."""
    t = np.array([[6.0, 6.0], [2.0, 6.0]])
    scale = np.array([6.0, 2.0])
    spans = np.array([[2.0, 4.0], [0.0, 0.0]])
    workers = np.array([4.0, 4.0])
    x = alloc.max_min_fairness(t, scale, np.ones(2), workers, aware=aware, spans=spans)
    share = x[0].sum()
    assert share > 0.1
    assert x[0] == pytest.approx(share * spans[0] / 6.0, abs=1e-6)
    used = scale[:, None] * x
    assert np.all(used.sum(axis=0) <= workers + 1e-6)


def test_gavel_las_runs_a_job_larger_than_either_type_over_both() -> None:
    """One server of 4 slow GPUs and one of 4 fast: a 6-GPU job fits neither type, so
    Gavel's rule would leave it waiting; here it starts over both, 4 fast and 2 slow."""
    cluster = make_typed_cluster((SLOW, 1), (FAST, 1))
    job = make_view(make_job("big", 6, duration_s=1000.0))
    snapshot = Snapshot(now_s=0.0, cluster=cluster, jobs=(job,), placer=ConsolidatedPlacer(cluster))
    for policy in ("gavel-las", "gavel-ftf", "gavel-makespan", "gavel-fifo"):
        plan = make_policy(policy).schedule(snapshot, None)
        placed = plan.run.get("big")
        assert placed is not None, policy
        assert dict(placed.per_node) == {0: 2, 1: 4}, policy


def test_a_spanned_job_keeps_its_gpus_and_its_time_counts_on_both_types() -> None:
    """The next round the running job keeps its GPUs, and the round it ran counts on
    each type it spans (Gavel's time received per type, priority = X / share)."""
    cluster = make_typed_cluster((SLOW, 1), (FAST, 1))
    policy = make_policy("gavel-las")
    waiting = make_view(make_job("big", 6, duration_s=10_000.0))
    first = policy.schedule(
        Snapshot(now_s=0.0, cluster=cluster, jobs=(waiting,), placer=ConsolidatedPlacer(cluster)),
        None,
    )
    placed = first.run["big"]
    running = make_view(
        make_job("big", 6, duration_s=10_000.0), status=JobStatus.RUNNING, allocation=placed
    )
    second = policy.schedule(
        Snapshot(now_s=360.0, cluster=cluster, jobs=(running,), placer=ConsolidatedPlacer(cluster)),
        first.state,
    )
    assert second.run["big"] == placed
    assert second.state.counters.job_s["big"] == pytest.approx((180.0 + 360.0,) * 2)
