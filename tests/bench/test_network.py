"""bench/network.py's issue-19 measurement settings: burst arrivals and the backlogged window."""

from __future__ import annotations

import pytest

from bench.network_phase_replay import RoundMark, backlogged_utilization, phase_replay
from bench.network_workload import workload


def test_burst_arrivals_submit_the_same_jobs_at_zero() -> None:
    poisson = workload(20, seed=3, cluster_gpus=128, load=0.9)
    burst = workload(20, seed=3, cluster_gpus=128, load=0.9, arrivals="burst")
    assert {j.submit_s for j in burst} == {0.0}
    assert [(j.job_id, j.model, j.num_gpus, j.duration_s) for j in burst] == [
        (j.job_id, j.model, j.num_gpus, j.duration_s) for j in poisson
    ]
    with pytest.raises(ValueError, match="unknown arrivals"):
        workload(2, seed=3, cluster_gpus=128, load=0.9, arrivals="closed")


def test_backlogged_utilization_counts_the_stretches_after_rounds_with_a_queue() -> None:
    marks = [
        RoundMark(0.0, 10, 0.0, queued=2),
        RoundMark(100.0, 10, 800.0, queued=1),
        RoundMark(400.0, 10, 2600.0, queued=0),
        RoundMark(900.0, 10, 3600.0, queued=0),  # drained: not counted
    ]
    assert backlogged_utilization(marks) == pytest.approx(2600.0 / (10 * 400))
    assert backlogged_utilization(marks[2:]) is None


def test_a_replay_reports_busy_share_of_the_backlogged_window() -> None:
    row = phase_replay(
        (
            "comm-heavy-25g",
            "comm-heavy",
            "fifo",
            "topology-aware",
            "fair",
            40,
            0.9,
            7,
            False,
            "burst",
        )
    )
    assert row["finished"] == 40
    assert 0.0 < row["util_backlog"] <= 1.0
