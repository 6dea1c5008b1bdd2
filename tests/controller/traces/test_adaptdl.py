from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.adaptdl import MAX_GPUS, REFERENCE_GPU_HOURS, load_adaptdl
from tests.controller.traces.builders import write

WORKLOAD = """
name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,6,2048
imagenet-1,1604,imagenet,32,6400
"""


def test_jobs_are_elastic_with_a_length_from_the_reference_table(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "workload-1.csv", WORKLOAD))
    assert trace.fmt == "adaptdl"
    cifar, imagenet = trace.jobs
    assert (cifar.job_id, cifar.submit_s, cifar.model, cifar.batch_size) == (
        "cifar10-0",
        0.0,
        "cifar10",
        2048,
    )
    assert (cifar.min_gpus, cifar.num_gpus, cifar.max_gpus) == (1, 6, MAX_GPUS)
    assert cifar.elastic
    assert cifar.duration_s == pytest.approx(REFERENCE_GPU_HOURS["cifar10"] * 3600 / 6)
    assert imagenet.submit_s == 1604 - 107
    assert imagenet.duration_s == pytest.approx(REFERENCE_GPU_HOURS["imagenet"] * 3600 / 32)


def test_caller_can_give_its_own_gpu_hours(tmp_path: Path) -> None:
    path = write(tmp_path, "workload.csv", WORKLOAD)
    parsed = load_adaptdl(path, gpu_hours={"cifar10": 3.0, "imagenet": 64.0})
    assert [job.duration_s for job in parsed.jobs] == [1800.0, 7200.0]


def test_unknown_application_names_the_known_ones(tmp_path: Path) -> None:
    path = write(
        tmp_path, "workload.csv", "name,time,application,num_replicas,batch_size\nx-0,0,gpt9,1,8\n"
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "application")
    assert "yolov3" in str(caught.value)
