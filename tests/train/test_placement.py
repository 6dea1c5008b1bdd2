from pathlib import Path

import pytest

from gpuflow.train.placement import PlacementError, ReportTarget, read_placement

GANG = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "MASTER_ADDR": "job-0.svc",
    "MASTER_PORT": "29500",
    "GPUFLOW_GPUS_PER_POD": "4",
    "GPUFLOW_JOB": "mlp",
    "GPUFLOW_ATTEMPT": "3",
    "GPUFLOW_RESUME": "1",
    "GPUFLOW_CHECKPOINT_PATH": "/ckpt/mlp",
    "GPUFLOW_BATCH_SIZE": "256",
    "GPUFLOW_PODINFO_DIR": "/etc/gpuflow/podinfo",
    "GPUFLOW_API_URL": "http://api:8000/api/v1",
    "GPUFLOW_JOB_ID": "j-1",
    "GPUFLOW_METRICS_TOKEN": "secret",
}


def test_reads_everything_the_operator_injects() -> None:
    p = read_placement(GANG)
    assert (p.rank, p.world_size, p.master_addr, p.master_port) == (1, 2, "job-0.svc", 29500)
    assert (p.gpus_per_pod, p.gpus, p.job, p.attempt, p.resume) == (4, 8, "mlp", 3, True)
    assert p.checkpoint_path == Path("/ckpt/mlp")
    assert p.batch_size == 256
    assert p.annotations_file == Path("/etc/gpuflow/podinfo/annotations")
    assert p.report == ReportTarget("http://api:8000/api/v1", "j-1", "secret")
    assert p.report.metrics_url == "http://api:8000/api/v1/jobs/j-1/metrics"


def test_torchrun_ranks_are_processes_so_gpus_is_the_world() -> None:
    p = read_placement({**GANG, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert (p.rank, p.gpus, p.under_torchrun) == (5, 8, True)


def test_outside_gpuflow_a_gang_of_one_without_reports(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="gpuflow.train.placement")
    p = read_placement({})
    assert (p.rank, p.world_size, p.resume, p.batch_size, p.report) == (0, 1, False, None, None)
    assert p.checkpoint_path is None and p.annotations_file is None
    assert "reporting off" in caplog.text and "GPUFLOW_METRICS_TOKEN" in caplog.text


@pytest.mark.parametrize("missing", ["GPUFLOW_API_URL", "GPUFLOW_JOB_ID", "GPUFLOW_METRICS_TOKEN"])
def test_any_reporting_variable_missing_turns_reporting_off(missing: str) -> None:
    env = {k: v for k, v in GANG.items() if k != missing}
    assert read_placement(env).report is None


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("RANK", "one", "RANK='one' is not an integer"),
        ("RANK", "2", "RANK=2 must be < WORLD_SIZE=2"),
        ("RANK", "-1", "RANK=-1 must be >= 0"),
        ("WORLD_SIZE", "0", "WORLD_SIZE=0 must be >= 1"),
        ("MASTER_PORT", "70000", "MASTER_PORT=70000 must be <= 65535"),
        ("MASTER_ADDR", "", "MASTER_ADDR is empty"),
        ("GPUFLOW_GPUS_PER_POD", "0.5", "GPUFLOW_GPUS_PER_POD='0.5' is not an integer"),
        ("GPUFLOW_BATCH_SIZE", "0", "GPUFLOW_BATCH_SIZE=0 must be >= 1"),
        ("GPUFLOW_RESUME", "yes", "GPUFLOW_RESUME='yes' must be '0' or '1'"),
        ("GPUFLOW_ATTEMPT", "0", "GPUFLOW_ATTEMPT=0 must be >= 1"),
        ("GPUFLOW_API_URL", "api:8000", "GPUFLOW_API_URL='api:8000' is not an http(s) URL"),
    ],
)
def test_a_malformed_variable_is_named(name: str, value: str, says: str) -> None:
    with pytest.raises(PlacementError) as err:
        read_placement({**GANG, name: value})
    assert str(err.value) == says
