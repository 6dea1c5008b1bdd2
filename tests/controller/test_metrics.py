"""Figures of a replay, checked against values worked out by hand.

The builders here (`make_outcome`, `make_sample`, `make_result`) are shared with
test_report.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence

import pytest

from controller.metrics import (
    HEADLINE_KEYS,
    Summary,
    finish_time_fairness,
    headline,
    independent_time_s,
    jain_index,
    summarize,
)
from controller.records import JobOutcome, ReplayResult, TimelineSample


def make_outcome(
    job_id: str = "j",
    *,
    submit_s: float = 0.0,
    start_s: float | None = None,
    finish_s: float | None = None,
    num_gpus: int = 1,
    nominal_s: float | None = None,
    contention_avg: float = 1.0,
    restarts: int = 0,
    preemptions: int = 0,
    tenant: str = "default",
) -> JobOutcome:
    """A job's outcome; nominal_s defaults to its time from start to finish (or 100 s)."""
    if nominal_s is None:
        nominal_s = 100.0 if start_s is None or finish_s is None else finish_s - start_s
    executed_s = 0.0 if start_s is None else (finish_s or start_s) - start_s
    return JobOutcome(
        job_id=job_id,
        tenant=tenant,
        model="resnet50",
        num_gpus=num_gpus,
        submit_s=submit_s,
        first_start_s=start_s,
        finish_s=finish_s,
        attained_gpu_s=executed_s * num_gpus,
        executed_s=executed_s,
        nominal_s=nominal_s,
        restarts=restarts,
        preemptions=preemptions,
        contention_avg=contention_avg,
    )


def make_sample(
    t_s: float,
    *,
    gpus_total: int = 8,
    allocated: float = 0.0,
    busy: float = 0.0,
    queued: int = 0,
    running: int = 0,
) -> TimelineSample:
    return TimelineSample(
        t_s=t_s,
        gpus_total=gpus_total,
        gpus_allocated=allocated,
        gpus_busy=busy,
        queued=queued,
        running=running,
    )


def make_result(
    jobs: Sequence[JobOutcome] = (),
    timeline: Sequence[TimelineSample] = (),
    *,
    policy: str = "fifo",
    capacity: float = 0.0,
    allocated: float = 0.0,
    busy: float = 0.0,
    trace: str = "tiny",
) -> ReplayResult:
    return ReplayResult(
        policy=policy,
        cluster="one-node",
        trace=trace,
        jobs=list(jobs),
        timeline=list(timeline),
        wall_s=1.5,
        rounds=len(timeline),
        gpu_s_capacity=capacity,
        gpu_s_allocated=allocated,
        gpu_s_busy=busy,
    )


# --- completion and queueing -------------------------------------------------------


def test_jct_mean_median_and_tail_percentiles() -> None:
    # JCTs 10, 20, 30, 40. Linear percentiles: p95 at rank 0.95*3 = 2.85 -> 30 + 0.85*10.
    jobs = [make_outcome(f"j{i}", start_s=0.0, finish_s=10.0 * i) for i in range(1, 5)]
    summary = summarize(make_result(jobs))
    assert summary.avg_jct_s == pytest.approx(25.0)
    assert summary.median_jct_s == pytest.approx(25.0)
    assert summary.p95_jct_s == pytest.approx(38.5)
    assert summary.p99_jct_s == pytest.approx(39.7)


def test_jct_counts_from_submission_not_start() -> None:
    summary = summarize(make_result([make_outcome(submit_s=5.0, start_s=15.0, finish_s=45.0)]))
    assert summary.avg_jct_s == pytest.approx(40.0)
    assert summary.p99_jct_s == pytest.approx(40.0)


def test_queueing_counts_only_jobs_that_started() -> None:
    jobs = [
        make_outcome("a", submit_s=0.0, start_s=0.0, finish_s=10.0),
        make_outcome("b", submit_s=0.0, start_s=30.0),  # running at the end
        make_outcome("c", submit_s=5.0),  # never started
    ]
    summary = summarize(make_result(jobs))
    assert summary.started == 2
    assert summary.avg_queueing_s == pytest.approx(15.0)
    assert summary.median_queueing_s == pytest.approx(15.0)
    assert summary.p99_queueing_s == pytest.approx(29.7)  # 0 + 0.99 * 30


def test_unfinished_jobs_are_counted_but_have_no_jct() -> None:
    jobs = [
        make_outcome("a", start_s=0.0, finish_s=10.0),
        make_outcome("b", start_s=0.0),
        make_outcome("c"),
    ]
    summary = summarize(make_result(jobs))
    assert (summary.jobs, summary.finished, summary.unfinished) == (3, 1, 2)
    assert summary.avg_jct_s == pytest.approx(10.0)


def test_no_finished_job_leaves_jct_figures_none() -> None:
    summary = summarize(make_result([make_outcome("a", submit_s=3.0)]))
    assert summary.finished == 0
    assert summary.avg_jct_s is None
    assert summary.p99_jct_s is None
    assert summary.avg_queueing_s is None


# --- makespan ----------------------------------------------------------------------


def test_makespan_runs_from_first_submit_to_last_finish() -> None:
    jobs = [
        make_outcome("a", submit_s=10.0, start_s=10.0, finish_s=50.0),
        make_outcome("b", submit_s=20.0, start_s=50.0, finish_s=110.0),
    ]
    timeline = [make_sample(10.0), make_sample(200.0)]  # samples past the end do not count
    assert summarize(make_result(jobs, timeline)).makespan_s == pytest.approx(100.0)


def test_makespan_with_unfinished_jobs_runs_to_the_last_sample() -> None:
    jobs = [
        make_outcome("a", submit_s=10.0, start_s=10.0, finish_s=50.0),
        make_outcome("b", submit_s=20.0, start_s=50.0),
    ]
    timeline = [make_sample(10.0), make_sample(300.0)]
    assert summarize(make_result(jobs, timeline)).makespan_s == pytest.approx(290.0)


def test_makespan_with_unfinished_jobs_keeps_a_later_finish() -> None:
    jobs = [make_outcome("a", start_s=0.0, finish_s=80.0), make_outcome("b", start_s=0.0)]
    timeline = [make_sample(0.0), make_sample(60.0)]
    assert summarize(make_result(jobs, timeline)).makespan_s == pytest.approx(80.0)


# --- usage and counters -----------------------------------------------------------


def test_allocation_and_utilization_are_shares_of_capacity() -> None:
    result = make_result(capacity=1000.0, allocated=800.0, busy=600.0)
    summary = summarize(result)
    assert summary.gpu_allocation == pytest.approx(0.8)
    assert summary.gpu_utilization == pytest.approx(0.6)


def test_zero_capacity_gives_zero_usage() -> None:
    summary = summarize(make_result(capacity=0.0, allocated=5.0, busy=5.0))
    assert summary.gpu_allocation == 0.0
    assert summary.gpu_utilization == 0.0


def test_preemptions_and_restarts_are_summed_over_jobs() -> None:
    jobs = [
        make_outcome("a", restarts=3, preemptions=2),
        make_outcome("b", restarts=1, preemptions=1),
        make_outcome("c"),
    ]
    summary = summarize(make_result(jobs))
    assert (summary.restarts, summary.preemptions) == (4, 3)


def test_cluster_gpus_is_the_peak_of_gpus_up() -> None:
    timeline = [make_sample(0.0, gpus_total=8), make_sample(1.0, gpus_total=16)]
    assert summarize(make_result([], timeline)).cluster_gpus == 16


# --- finish-time fairness and Jain's index -----------------------------------------


@pytest.mark.parametrize(
    ("num_gpus", "contention_avg", "nominal_s", "expected_s"),
    [
        (2, 2.0, 50.0, 50.0),  # share is 8/2 = 4 GPUs: the gang of 2 fits
        (4, 2.0, 50.0, 50.0),  # fits exactly
        (8, 2.0, 50.0, 100.0),  # needs 8 of a 4-GPU share: twice as long
        (8, 4.0, 50.0, 200.0),  # 2-GPU share: four times
        (2, 0.5, 50.0, 50.0),  # contention below 1 means the job alone: N = 1
        (16, 1.0, 10.0, 20.0),  # a gang larger than the cluster is time-sliced too
    ],
)
def test_independent_time_on_a_one_over_n_share(
    num_gpus: int, contention_avg: float, nominal_s: float, expected_s: float
) -> None:
    job = make_outcome(num_gpus=num_gpus, contention_avg=contention_avg, nominal_s=nominal_s)
    assert independent_time_s(job, total_gpus=8) == pytest.approx(expected_s)


def test_rho_is_jct_over_independent_time() -> None:
    jobs = [
        # JCT 100, T_id 50 (fits its 4-GPU share): rho 2.
        make_outcome("slow", start_s=50.0, finish_s=100.0, num_gpus=2, contention_avg=2.0),
        # JCT 100, T_id 50 * 8 * 2 / 8 = 100: rho 1.
        make_outcome(
            "fair", start_s=0.0, finish_s=100.0, num_gpus=8, contention_avg=2.0, nominal_s=50.0
        ),
        # JCT 40, T_id 80: rho 0.5.
        make_outcome("fast", start_s=0.0, finish_s=40.0, num_gpus=1, nominal_s=80.0),
    ]
    result = make_result(jobs, [make_sample(0.0, gpus_total=8)])
    assert finish_time_fairness(result) == pytest.approx({"slow": 2.0, "fair": 1.0, "fast": 0.5})

    summary = summarize(result)
    assert summary.ftf_jobs == 3
    assert summary.avg_ftf_rho == pytest.approx(3.5 / 3)
    assert summary.max_ftf_rho == pytest.approx(2.0)
    assert summary.frac_ftf_rho_gt_1 == pytest.approx(1 / 3)  # rho == 1 is not above 1
    # Jain over 1/rho = 0.5, 1, 2: 3.5^2 / (3 * 5.25).
    assert summary.jain_index == pytest.approx(12.25 / 15.75)


def test_rho_is_undefined_without_a_finish_a_run_time_or_a_cluster() -> None:
    jobs = [
        make_outcome("unfinished", start_s=0.0),
        make_outcome("no-work", start_s=0.0, finish_s=10.0, nominal_s=0.0),
        make_outcome("instant", start_s=0.0, finish_s=0.0, nominal_s=5.0),
        make_outcome("ok", start_s=0.0, finish_s=10.0),
    ]
    assert finish_time_fairness(make_result(jobs, [make_sample(0.0)])).keys() == {"ok"}
    assert finish_time_fairness(make_result(jobs, [])) == {}

    summary = summarize(make_result(jobs, []))
    assert summary.ftf_jobs == 0
    assert summary.avg_ftf_rho is None
    assert summary.frac_ftf_rho_gt_1 is None
    assert summary.jain_index is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 3.0, 3.0, 3.0], 1.0),
        ([0.0, 0.0, 7.0, 0.0], 0.25),  # one takes all: 1/n
        ([1.0, 2.0], 0.9),  # 3^2 / (2 * 5)
        ([5.0], 1.0),
    ],
)
def test_jain_index(values: list[float], expected: float) -> None:
    assert jain_index(values) == pytest.approx(expected)


@pytest.mark.parametrize("values", [[], [0.0, 0.0]])
def test_jain_index_is_none_when_undefined(values: list[float]) -> None:
    assert jain_index(values) is None


# --- the record --------------------------------------------------------------------


def test_empty_replay_summarizes_to_zeros_and_nones() -> None:
    summary = summarize(make_result())
    assert (summary.jobs, summary.finished, summary.unfinished, summary.started) == (0, 0, 0, 0)
    assert summary.makespan_s == 0.0
    assert summary.cluster_gpus == 0
    assert summary.avg_jct_s is None
    assert summary.jain_index is None
    json.dumps(summary.to_dict(), allow_nan=False)


def test_to_dict_has_snake_case_keys_in_field_order() -> None:
    jobs = [make_outcome("a", start_s=0.0, finish_s=10.0)]
    as_dict = summarize(make_result(jobs, [make_sample(0.0)])).to_dict()
    assert list(as_dict) == [f.name for f in dataclasses.fields(Summary)]
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", key) for key in as_dict)
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilization", "gpu_allocation"):
        assert key in as_dict
    assert json.loads(json.dumps(as_dict, allow_nan=False)) == as_dict


def test_summary_is_frozen() -> None:
    summary = summarize(make_result())
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.jobs = 3  # type: ignore[misc]


def test_headline_has_exactly_the_cli_keys() -> None:
    jobs = [make_outcome("a", start_s=0.0, finish_s=10.0)]
    summary = summarize(make_result(jobs, capacity=10.0, busy=5.0))
    line = headline(summary, "tiresias", wall_s=2.5)
    assert set(line) == {
        "policy",
        "jobs",
        "avg_jct_s",
        "p99_jct_s",
        "makespan_s",
        "gpu_utilization",
        "wall_s",
    }
    assert tuple(line) == HEADLINE_KEYS
    assert line["policy"] == "tiresias"
    assert line["jobs"] == 1
    assert line["avg_jct_s"] == pytest.approx(10.0)
    assert line["gpu_utilization"] == pytest.approx(0.5)
    assert line["wall_s"] == 2.5
    json.dumps(headline(summarize(make_result()), "fifo", 0.0), allow_nan=False)
