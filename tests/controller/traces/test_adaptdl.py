from pathlib import Path

import pytest

from controller.traces import TraceError, load_trace
from controller.traces.formats.adaptdl import MAX_GPUS, load_adaptdl
from tests.controller.traces.builders import write

WORKLOAD = """
name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,6,2048
imagenet-1,1604,imagenet,32,6400
"""


def test_jobs_are_elastic_with_their_applications_measured_work(tmp_path: Path) -> None:
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
    # The artifact's cifar10 ends at its 100th epoch: 39,062.9 steps at batch 128 (the
    # least final progress over the runs at each batch; the 128 run's is 39,063).
    assert (cifar.work_batch, cifar.iterations) == (128, pytest.approx(39062.908, abs=1e-3))
    assert cifar.duration_s is None
    assert imagenet.submit_s == 1604 - 107
    assert (imagenet.work_batch, imagenet.batch_size) == (200, 6400)
    assert imagenet.iterations == pytest.approx(576525.59, abs=0.01)


def test_a_row_without_a_batch_runs_at_the_work_batch(tmp_path: Path) -> None:
    path = write(
        tmp_path, "workload.csv", "name,time,application,num_replicas,batch_size\nb-0,0,bert,2,\n"
    )
    (job,) = load_adaptdl(path).jobs
    assert (job.batch_size, job.work_batch, job.iterations) == (12, 12, 14774.0)


def test_unknown_application_names_the_known_ones(tmp_path: Path) -> None:
    path = write(
        tmp_path, "workload.csv", "name,time,application,num_replicas,batch_size\nx-0,0,gpt9,1,8\n"
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "application")
    assert "yolov3" in str(caught.value)
