from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from tests.controller.traces.builders import write


def test_reads_iterations_duration_and_model(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "60_job.csv",
        """
        job_id,num_gpu,submit_time,iterations,model_name,duration,interval
        0,1,0,606,vgg19,164,30
        1,8,30,133,vgg11,147,23
        2,2,53,0,inception4,127,26
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "tiresias"
    first, second, third = trace.jobs
    assert (first.job_id, first.num_gpus, first.submit_s, first.model) == ("0", 1, 0.0, "vgg19")
    assert (first.iterations, first.duration_s) == (606.0, 164.0)
    assert (second.job_id, second.num_gpus, second.submit_s) == ("1", 8, 30.0)
    assert (third.iterations, third.duration_s) == (None, 127.0)


def test_a_job_without_length_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "job.csv",
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,0,vgg19,0,0\n",
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "duration")
