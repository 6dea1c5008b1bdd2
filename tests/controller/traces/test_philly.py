from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from tests.controller.traces.builders import philly_attempt, philly_job, write, write_philly_json


def test_json_job_takes_first_attempt_gpus_and_sums_attempt_run_times(tmp_path: Path) -> None:
    retried = philly_job(
        "app_1",
        "2017-10-07 01:11:39",
        philly_attempt("2017-10-07 01:12:09", "2017-10-07 01:13:23", 8),  # 74 s
        philly_attempt("2017-10-07 02:00:00", "2017-10-07 03:00:00", 4, 4),  # 3600 s
        vc="ee9e8c",
        user="ce2f4c",
    )
    spread = philly_job(
        "app_2",
        "2017-10-07 01:12:39",
        philly_attempt("2017-10-07 01:13:00", "2017-10-07 01:14:00", 2, 2),
        status="Killed",
    )
    trace = load_trace(write_philly_json(tmp_path, retried, spread))
    assert trace.fmt == "philly-json"
    first, second = trace.jobs
    assert (first.job_id, first.submit_s, first.num_gpus) == ("app_1", 0.0, 8)
    assert first.duration_s == 74 + 3600
    assert (first.tenant, first.user) == ("ee9e8c", "ce2f4c")
    assert (second.job_id, second.submit_s, second.num_gpus) == ("app_2", 60.0, 4)
    assert second.duration_s == 60


def test_json_skips_jobs_that_never_ran(tmp_path: Path) -> None:
    ran = philly_job(
        "ok", "2017-10-07 00:00:00", philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:01:10", 1)
    )
    no_attempts = philly_job("none", "2017-10-07 00:00:01")
    no_end = philly_job(
        "running", "2017-10-07 00:00:02", philly_attempt("2017-10-07 00:00:10", None, 1)
    )
    no_gpus = philly_job(
        "cpu", "2017-10-07 00:00:03", philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:00:20")
    )
    zero = philly_job(
        "zero",
        "2017-10-07 00:00:04",
        philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:00:10", 1),
    )
    trace = load_trace(write_philly_json(tmp_path, ran, no_attempts, no_end, no_gpus, zero))
    assert [job.job_id for job in trace.jobs] == ["ok"]
    assert trace.skipped == 4


def test_json_bad_job_reports_its_line_and_key(tmp_path: Path) -> None:
    good = philly_job(
        "a", "2017-10-07 00:00:00", philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:01:10", 1)
    )
    backwards = philly_job(
        "b",
        "2017-10-07 00:00:00",
        philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:01:10", 1),
        philly_attempt("2017-10-07 00:05:00", "2017-10-07 00:04:00", 1),
    )
    with pytest.raises(TraceError) as caught:
        load_trace(write_philly_json(tmp_path, good, backwards))
    assert (caught.value.line, caught.value.field) == (3, "attempts[1].end_time")


def test_json_duplicate_job_id_is_reported_at_the_second(tmp_path: Path) -> None:
    job = philly_job(
        "same",
        "2017-10-07 00:00:00",
        philly_attempt("2017-10-07 00:00:10", "2017-10-07 00:01:10", 1),
    )
    with pytest.raises(TraceError) as caught:
        load_trace(write_philly_json(tmp_path, job, job, job))
    assert (caught.value.line, caught.value.field) == (3, "job_id")
    assert "line 2" in str(caught.value)


def test_json_that_is_not_a_list_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "log.json", '{"jobid": "a"}\n')
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert caught.value.line == 1


def test_csv_reads_date_time_or_seconds_timestamps(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly.csv",
        """
        timestamp,duration,num_gpus,gpu_time,cluster
        2017-10-09 07:01:55,66.0,1,66.0,11cb48
        2017-10-07 01:11:39,193256.0,8,1546048.0,ee9e8c
        2017-10-09 07:02:00,0.0,1,0.0,11cb48
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "philly-csv" and trace.skipped == 1
    first, second = trace.jobs
    assert (first.job_id, first.submit_s, first.num_gpus, first.duration_s) == (
        "philly-1",
        0.0,
        8,
        193256.0,
    )
    assert first.tenant == "ee9e8c"
    assert second.job_id == "philly-0"
    assert second.submit_s == 2 * 86400 + 5 * 3600 + 50 * 60 + 16  # 10-09 07:01:55 - 10-07 01:11:39

    numeric = write(
        tmp_path,
        "seconds.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n100,5,2,10,c\n40,7,1,7,c\n",
    )
    assert [(job.job_id, job.submit_s) for job in load_trace(numeric).jobs] == [
        ("philly-1", 0.0),
        ("philly-0", 60.0),
    ]
