"""bench/network.py's issue-19 measurement settings: burst arrivals and the backlogged window."""

from __future__ import annotations

import pytest

from bench.network import backlogged_utilization, workload
from controller.records import TimelineSample


def _sample(t_s: float, busy: float, queued: int) -> TimelineSample:
    return TimelineSample(t_s, 10, 10.0, busy, queued, running=1)


def test_burst_arrivals_submit_the_same_jobs_at_zero() -> None:
    poisson = workload(20, seed=3, cluster_gpus=128, load=0.9)
    burst = workload(20, seed=3, cluster_gpus=128, load=0.9, arrivals="burst")
    assert {j.submit_s for j in burst} == {0.0}
    assert [(j.job_id, j.model, j.num_gpus, j.duration_s) for j in burst] == [
        (j.job_id, j.model, j.num_gpus, j.duration_s) for j in poisson
    ]
    with pytest.raises(ValueError, match="unknown arrivals"):
        workload(2, seed=3, cluster_gpus=128, load=0.9, arrivals="closed")


def test_backlogged_utilization_holds_each_sample_while_jobs_wait() -> None:
    timeline = [
        _sample(0.0, 8.0, queued=2),  # 100 s at 8 of 10 busy
        _sample(100.0, 6.0, queued=1),  # 300 s at 6
        _sample(400.0, 2.0, queued=0),  # drained: not counted
        _sample(900.0, 0.0, queued=0),
    ]
    assert backlogged_utilization(timeline) == pytest.approx((8 * 100 + 6 * 300) / (10 * 400))
    assert backlogged_utilization(timeline[2:]) is None
