from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from tests.controller.traces.builders import write

HEADER = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,"
    "submit_time,start_time,end_time,duration,queue"
)


def test_reads_gpu_jobs_and_skips_cpu_and_unstarted_ones(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "cluster_log.csv",
        f"""
        {HEADER}
        jobA,uA,vc1,n,8,48,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:01:10,,3600,0
        jobB,uB,vc2,n,0,4,1,COMPLETED,2020-04-01 00:00:20,2020-04-01 00:00:20,,600,0
        jobC,uC,vc2,n,1,6,1,CANCELLED,2020-04-01 00:00:30,,2020-04-01 00:05:00,0,270
        jobD,uD,vc3,n,2,12,1,FAILED,2020-04-01 00:01:00,2020-04-01 00:02:00,2020-04-01 00:02:30,,0
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "helios" and trace.skipped == 2
    a, d = trace.jobs
    assert (a.job_id, a.submit_s, a.num_gpus, a.duration_s, a.tenant, a.user) == (
        "jobA",
        0.0,
        8,
        3600.0,
        "vc1",
        "uA",
    )
    assert (d.job_id, d.submit_s, d.num_gpus, d.duration_s) == ("jobD", 50.0, 2, 30.0)


def test_bad_submit_time_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path, "cluster_log.csv", f"{HEADER}\nj,u,v,n,1,1,1,COMPLETED,yesterday,,,60,0\n"
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "submit_time")
