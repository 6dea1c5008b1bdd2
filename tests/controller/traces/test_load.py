"""load_trace: ordering, shifting, and the errors common to every format."""

from pathlib import Path

import pytest

from controller.traces import FORMATS, TraceError, UnknownFormatError, load_trace
from controller.traces.detection import detect_format
from tests.controller.traces.builders import philly_attempt, philly_job, write, write_philly_json


def test_jobs_are_sorted_by_submit_then_id_and_start_at_zero(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.csv",
        """
        job_id,submit_s,num_gpus,duration_s
        c,500,1,10
        b,100,1,10
        a,500,1,10
        """,
    )
    trace = load_trace(path)
    assert [(job.job_id, job.submit_s) for job in trace.jobs] == [
        ("b", 0.0),
        ("a", 400.0),
        ("c", 400.0),
    ]


def test_named_format_overrides_detection(tmp_path: Path) -> None:
    path = write(tmp_path, "weird.dat", "job_id,num_gpu,submit_time,duration\n7,2,5,60\n")
    trace = load_trace(path, "tiresias")
    assert trace.fmt == "tiresias" and trace.jobs[0].job_id == "7"


def test_unknown_format_name_lists_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "job_id,submit_s,num_gpus,duration_s\na,0,1,1\n")
    with pytest.raises(UnknownFormatError) as caught:
        load_trace(path, "slurm")
    assert "slurm" in str(caught.value)
    assert all(name in str(caught.value) for name in FORMATS)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "nope.csv", "gpuflow")


def test_header_only_trace_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "job_id,submit_s,num_gpus,duration_s\n")
    with pytest.raises(TraceError, match="no jobs"):
        load_trace(path)


def test_trace_whose_every_job_is_skipped_says_so(tmp_path: Path) -> None:
    path = write_philly_json(tmp_path, philly_job("a", "2017-10-07 00:00:00"))
    with pytest.raises(TraceError, match="1 records skipped"):
        load_trace(path)


DUPLICATES = {
    "gpuflow": ("jobs.csv", "job_id,submit_s,num_gpus,duration_s\na,0,1,5\nb,1,1,5\na,2,1,5\n", 4),
    "tiresias": ("jobs.csv", "job_id,num_gpu,submit_time,duration\n1,1,0,5\n1,1,3,5\n", 3),
    "helios": ("log.csv", "job_id,gpu_num,submit_time,duration\nj,1,0,5\nk,1,1,5\nj,1,2,5\n", 4),
    "adaptdl": (
        "w.csv",
        "name,time,application,num_replicas,batch_size\nx,0,ncf,1,8\nx,9,ncf,1,8\n",
        3,
    ),
    "alibaba-openb": (
        "pods.csv",
        "name,num_gpu,gpu_milli,creation_time,scheduled_time,deletion_time\np,1,1000,0,0,9\np,1,1000,1,1,9\n",
        3,
    ),
}


@pytest.mark.parametrize("fmt", sorted(DUPLICATES))
def test_duplicate_job_id_is_reported_at_the_second_occurrence(tmp_path: Path, fmt: str) -> None:
    name, text, line = DUPLICATES[fmt]
    path = write(tmp_path, name, text)
    assert detect_format(path) == fmt
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (line, "job_id")


def test_philly_json_example_loads_with_skips(tmp_path: Path) -> None:
    path = write_philly_json(
        tmp_path,
        philly_job(
            "a",
            "2017-10-07 00:00:00",
            philly_attempt("2017-10-07 00:00:01", "2017-10-07 00:00:02", 1),
        ),
        philly_job("b", "2017-10-07 00:00:00"),
    )
    trace = load_trace(path)
    assert (len(trace.jobs), trace.skipped) == (1, 1)


def test_max_jobs_stops_the_load_at_the_first_job_over(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    rows = "".join(f"j{i},{i},1,60\n" for i in range(5))
    path.write_text(f"job_id,submit_s,num_gpus,duration_s\n{rows}")
    assert len(load_trace(path, max_jobs=5).jobs) == 5
    with pytest.raises(TraceError, match=r"t.csv:6: more than 4 jobs \(the limit\)"):
        load_trace(path, max_jobs=4)
    assert len(load_trace(path).jobs) == 5  # the limit was for that load only
