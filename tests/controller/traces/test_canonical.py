from pathlib import Path

import pytest

from controller.model.job import JobSpec
from controller.model.precision import Precision
from controller.traces import TraceError, load_trace, write_canonical
from controller.traces.formats.canonical import COLUMNS
from tests.controller.traces.builders import write


def test_reads_every_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.csv",
        """
        job_id,submit_s,num_gpus,min_gpus,max_gpus,model,duration_s,iterations,batch_size,gpu_mem_mib,tenant,user,priority
        a,10,4,2,8,bert,3600,,32,8192,research,alice,2
        b,25.5,1,,,,,1000,,,,,
        """,
    )
    trace = load_trace(path)
    assert trace.fmt == "gpuflow" and trace.name == "jobs" and trace.skipped == 0
    assert trace.jobs == (
        JobSpec(
            job_id="a",
            submit_s=0.0,
            num_gpus=4,
            min_gpus=2,
            max_gpus=8,
            model="bert",
            duration_s=3600.0,
            batch_size=32,
            gpu_mem_mib=8192,
            tenant="research",
            user="alice",
            priority=2,
        ),
        JobSpec(job_id="b", submit_s=15.5, num_gpus=1, iterations=1000.0),
    )


def test_precision_is_read_and_defaults_to_tf32(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.csv",
        "job_id,submit_s,num_gpus,duration_s,precision\na,0,1,5,bf16\nb,0,1,5,\n",
    )
    a, b = load_trace(path).jobs
    assert (a.precision, b.precision) == (Precision.BF16, Precision.TF32)


def test_a_bad_precision_names_its_line_field_and_choices(tmp_path: Path) -> None:
    path = write(
        tmp_path, "jobs.csv", "job_id,submit_s,num_gpus,duration_s,precision\na,0,1,5,half\n"
    )
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert ":2" in message and "precision" in message
    assert "must be one of tf32, bf16, fp16, fp32, not 'half'" in message


def test_columns_may_come_in_any_order_and_be_left_out(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "num_gpus,iterations,job_id,submit_s\n2,50,x,0\n")
    (job,) = load_trace(path).jobs
    assert (job.job_id, job.num_gpus, job.iterations, job.duration_s) == ("x", 2, 50.0, None)
    assert job.tenant == "default"


def test_write_then_load_gives_the_same_jobs(tmp_path: Path) -> None:
    jobs = [
        JobSpec(job_id="j1", submit_s=0.0, num_gpus=2, duration_s=1234.5678, model="gpt2"),
        JobSpec(
            job_id="j2",
            submit_s=0.1 + 0.2,
            num_gpus=4,
            min_gpus=1,
            max_gpus=16,
            iterations=1e6,
            batch_size=256,
            gpu_mem_mib=4000,
            tenant="t, with comma",
            user="bob",
            priority=-1,
            precision=Precision.BF16,
            gpu_util=0.06,
        ),
    ]
    path = tmp_path / "out.csv"
    write_canonical(path, jobs)
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert load_trace(path).jobs == tuple(jobs)


def test_unknown_column_is_a_header_error(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "job_id,submit_s,num_gpus,duration\na,0,1,5\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path, "gpuflow")
    assert (caught.value.line, caught.value.field) == (1, "duration_s")


def test_header_without_duration_or_iterations_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "job_id,submit_s,num_gpus,model\na,0,1,x\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path, "gpuflow")
    assert (caught.value.line, caught.value.field) == (1, "duration_s")


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("a,0,2,3,,,", "min_gpus"),
        ("a,0,2,,1,,", "max_gpus"),
        ("a,0,2,,,,", "duration_s"),
        ("a,0,2,,,0,", "duration_s"),
        ("a,0,2,,,,-5", "iterations"),
        ("a,-1,2,,,5,", "submit_s"),
        (",0,2,,,5,", "job_id"),
        ("a,0,1.5,,,5,", "num_gpus"),
    ],
)
def test_bad_values_name_their_field(tmp_path: Path, row: str, field: str) -> None:
    header = "job_id,submit_s,num_gpus,min_gpus,max_gpus,duration_s,iterations"
    path = write(tmp_path, "jobs.csv", f"{header}\n{row}\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, field)


@pytest.mark.parametrize("util", ["0", "1.5", "-0.2", "most", "nan"])
def test_a_utilisation_outside_0_to_1_names_its_field(tmp_path: Path, util: str) -> None:
    path = write(
        tmp_path, "jobs.csv", f"job_id,submit_s,num_gpus,duration_s,gpu_util\na,0,1,5,{util}\n"
    )
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert (caught.value.line, caught.value.field) == (2, "gpu_util")


def test_an_openb_share_converted_keeps_its_utilisation(tmp_path: Path) -> None:
    """A share's utilisation (its gpu_milli) survives conversion, so the converted
    trace packs and slows as the original does."""
    source = write(
        tmp_path,
        "openb_pod_list_s.csv",
        """
        name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
        openb-pod-0022,4000,15258,1,250,,BE,Running,0,300,0
        """,
    )
    out = tmp_path / "converted.csv"
    write_canonical(out, load_trace(source).jobs)
    (job,) = load_trace(out).jobs
    assert job.gpu_util == 0.25


def test_an_adaptdl_workload_converted_keeps_its_work_batch(tmp_path: Path) -> None:
    """The Pollux workloads count work at the smallest batch: a conversion to the
    canonical form must carry that, or the converted jobs would run without their
    statistical-efficiency cost."""
    source = write(
        tmp_path,
        "workload.csv",
        """
        name,time,application,num_replicas,batch_size
        cifar10-0,0,cifar10,6,2048
        """,
    )
    jobs = load_trace(source).jobs
    out = tmp_path / "converted.csv"
    write_canonical(out, jobs)
    (job,) = load_trace(out).jobs
    assert (job.batch_size, job.work_batch) == (2048, 128)
    assert job == jobs[0]
