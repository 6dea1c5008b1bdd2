"""api.jobs.train_summary: a job's report rows as its DLJob's status.train (pure, no server)."""

from __future__ import annotations

import math

import pytest

from api.jobs.train_summary import (
    LOSS_POINTS,
    THROUGHPUT_SIZES,
    WINDOWS_PER_SIZE,
    Sample,
    summarise,
)

T0 = 1_800_000_000.0


class Reports:
    """Builds rows as the reporter sends them: one batch of named figures per step."""

    def __init__(self) -> None:
        self.rows: list[Sample] = []

    def add(self, step: int, at_s: float = T0, **figures: float) -> Reports:
        for name, value in figures.items():
            self.rows.append(Sample(len(self.rows) + 1, name, value, step, at_s))
        return self

    def window(self, step: int, gpus: int, batch: int, rate: float) -> Reports:
        return self.add(step, samples_per_s=rate, batch_size=batch, gpus=gpus)


def test_no_reports_no_summary() -> None:
    assert summarise([]) == {}


def test_only_what_was_reported_appears() -> None:
    got = summarise(Reports().add(7, at_s=T0 + 0.25, loss=2.5).rows)
    assert got == {
        "reportedAt": "2027-01-15T08:00:00.250000Z",
        "step": 7,
        "loss": [[7, 2.5]],
    }


def test_latest_figures_and_grad_stats() -> None:
    r = Reports()
    r.add(10, at_s=T0, grad_sqr=4.0, grad_var=9.0, step_time_s=0.5)
    r.window(10, 4, 256, 1000.0)
    r.add(20, at_s=T0 + 3, grad_sqr=5.0, grad_var=8.0, epoch_steps=500)
    r.window(20, 8, 512, 1900.0)
    got = summarise(r.rows)
    assert (got["step"], got["batchSize"], got["gpus"]) == (20, 512, 8)
    assert (got["samplesPerSecond"], got["gradSqr"], got["gradVar"]) == (1900.0, 5.0, 8.0)
    assert got["epochSteps"] == 500
    assert got["reportedAt"] == "2027-01-15T08:00:03.000000Z"
    assert "loss" not in got


def test_throughput_is_the_mean_of_the_last_windows_at_each_size() -> None:
    r = Reports()
    # 2 GPUs, batch 64: more windows than are averaged; only the last ones count.
    old = [500.0] * 3
    recent = [100.0 + i for i in range(WINDOWS_PER_SIZE)]
    for i, rate in enumerate(old + recent):
        r.window(10 * (i + 1), 2, 64, rate)
    # Then 4 GPUs at batch 128, two windows 5 steps apart.
    r.window(200, 4, 128, 300.0).window(205, 4, 128, 340.0)
    got = summarise(r.rows)
    assert got["throughput"] == [
        {
            "gpus": 2,
            "batchSize": 64,
            "samplesPerSecond": pytest.approx(sum(recent) / len(recent)),
            "steps": 10 * WINDOWS_PER_SIZE,
        },
        {"gpus": 4, "batchSize": 128, "samplesPerSecond": 320.0, "steps": 200 - 110 + 5},
    ]
    assert got["samplesPerSecond"] == 340.0


def test_a_window_takes_the_size_reported_at_its_step_whatever_the_order() -> None:
    r = Reports()
    r.add(10, batch_size=64, gpus=2).add(10, samples_per_s=100.0)
    # The size change and its window in one report, the window listed first.
    r.add(20, samples_per_s=400.0).add(20, batch_size=256, gpus=8)
    # A window with no size at its step keeps the last one reported.
    r.add(30, samples_per_s=420.0)
    sizes = {
        (t["gpus"], t["batchSize"]): t["samplesPerSecond"] for t in summarise(r.rows)["throughput"]
    }
    assert sizes == {(2, 64): 100.0, (8, 256): 410.0}


def test_windows_of_unknown_size_are_left_out() -> None:
    got = summarise(Reports().add(5, samples_per_s=10.0).rows)
    assert got["samplesPerSecond"] == 10.0 and "throughput" not in got


def test_only_the_most_recent_sizes_are_kept() -> None:
    r = Reports()
    for i in range(THROUGHPUT_SIZES + 3):
        r.window(i + 1, 1, 32 * (i + 1), float(i))
    r.window(100, 1, 32, 7.0)  # the first size runs again: recent once more
    kept = [t["batchSize"] for t in summarise(r.rows)["throughput"]]
    assert len(kept) == THROUGHPUT_SIZES
    assert 32 in kept and 64 not in kept and 96 not in kept and 128 not in kept
    assert kept == sorted(kept)


def test_loss_is_the_recent_tail_in_step_order() -> None:
    r = Reports()
    for step in range(1, LOSS_POINTS + 11):
        r.add(step, loss=1.0 / step)
    got = summarise(r.rows)["loss"]
    assert len(got) == LOSS_POINTS
    assert [s for s, _ in got] == list(range(11, LOSS_POINTS + 11))
    assert got[0] == [11, 1.0 / 11]


def test_after_a_restart_a_repeated_step_takes_the_later_loss() -> None:
    r = Reports()
    for step in (1, 2, 3, 4):
        r.add(step, loss=10.0 - step)
    for step in (3, 4, 5):  # resumed from the checkpoint at step 2
        r.add(step, loss=5.0 - step)
    got = summarise(r.rows)
    assert got["loss"] == [[1, 9.0], [2, 8.0], [3, 2.0], [4, 1.0], [5, 0.0]]
    assert got["step"] == 5


def test_rows_are_taken_in_arrival_order_not_as_given() -> None:
    rows = Reports().add(1, loss=3.0).add(2, loss=2.0, batch_size=64).rows
    got = summarise(list(reversed(rows)))
    assert got["step"] == 2 and got["batchSize"] == 64


def test_non_finite_values_are_dropped() -> None:
    got = summarise(Reports().add(1, loss=1.0).add(2, loss=math.nan, grad_var=math.inf).rows)
    assert got["loss"] == [[1, 1.0]] and "gradVar" not in got
