"""The example job under gpuflow.train as real processes: DDP over gloo on 127.0.0.1,
reports to a local HTTP server, SIGTERM, exit 75, resume, batch-size adoption."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from gpuflow.train import checkpoint
from gpuflow.train.batch import ANN_BATCH_SIZE
from gpuflow.train.preemption import EXIT_CHECKPOINTED
from tests.train.metrics_server import MetricsServer, free_port

ROOT = Path(__file__).resolve().parents[2]
METRICS = {
    "loss",
    "samples_per_s",
    "step_time_s",
    "batch_size",
    "gpus",
    "grad_sqr",
    "grad_var",
    "epoch_steps",
}


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    s = MetricsServer().start()
    yield s
    s.stop()


def _launch(
    tmp: Path, rank: int, world: int, port: int, server: MetricsServer, args: list[str], **env: str
) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLOW_", "RANK"))}
    podinfo = tmp / f"podinfo-{rank}"
    podinfo.mkdir(exist_ok=True)
    full = {
        **clean,
        "OMP_NUM_THREADS": "1",  # two ranks on a shared 2-core machine
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "GPUFLOW_JOB": "mlp",
        "GPUFLOW_GPUS_PER_POD": "1",
        "GPUFLOW_PODINFO_DIR": str(podinfo),
        "GPUFLOW_API_URL": server.url,
        "GPUFLOW_JOB_ID": "j-1",
        "GPUFLOW_METRICS_TOKEN": "tok",
        **env,
    }
    cmd = [sys.executable, "-m", "examples.train.train", *args]
    with (tmp / f"rank{rank}-{env.get('GPUFLOW_ATTEMPT', '1')}.log").open("wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=full, stdout=log, stderr=subprocess.STDOUT)


def _wait_for(cond: Callable[[], bool], procs: list[subprocess.Popen[bytes]], what: str) -> None:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if cond():
            return
        dead = [p.returncode for p in procs if p.poll() is not None]
        assert not dead, f"a rank exited ({dead}) before {what}"
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _losses(server: MetricsServer, since: int = 0) -> list[tuple[int, float]]:
    ms = [m for r in server.requests[since:] for m in r.metrics if m["name"] == "loss"]
    return [(m["step"], m["value"]) for m in ms]


def _values(server: MetricsServer, name: str, since: int = 0) -> list[float]:
    return [m["value"] for r in server.requests[since:] for m in r.metrics if m["name"] == name]


@pytest.mark.slow
def test_ddp_adopts_a_batch_then_checkpoints_on_sigterm_and_resumes(
    tmp_path: Path, server: MetricsServer
) -> None:
    ckpt = tmp_path / "ckpt"
    args = ["--steps", "100000", "--batch-size", "32", "--lr", "0.05", "--seed", "3"]
    args += ["--report-interval-s", "0.2", "--step-sleep-s", "0.005"]
    port = free_port()
    first = [
        _launch(tmp_path, r, 2, port, server, args, GPUFLOW_CHECKPOINT_PATH=str(ckpt))
        for r in range(2)
    ]
    try:
        _wait_for(lambda: any(s >= 10 for s, _ in _losses(server)), first, "step 10")
        # The operator re-annotates every pod; the kubelet rewrites each podinfo file.
        for r in range(2):
            (tmp_path / f"podinfo-{r}" / "annotations").write_text(f'{ANN_BATCH_SIZE}="64"\n')
        _wait_for(lambda: 64.0 in _values(server, "batch_size"), first, "batch 64")
        adopted_at = len(_losses(server))
        _wait_for(lambda: len(_losses(server)) >= adopted_at + 2, first, "reports at 64")
        for p in first:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=20) for p in first]
    finally:
        for p in first:
            p.kill() if p.poll() is None else None
    assert codes == [EXIT_CHECKPOINTED, EXIT_CHECKPOINTED]
    saved = torch.load(checkpoint.checkpoint_file(ckpt, 1), weights_only=True)["train"]
    stopped_at = saved["step"]
    assert saved["batch_size"] == 64
    run1 = _losses(server)
    assert run1[-1][0] == stopped_at  # the last report is the checkpointed step
    assert set(_values(server, "batch_size")) == {32.0, 64.0}
    assert set(_values(server, "gpus")) == {2.0}
    assert all(v > 0 for v in _values(server, "grad_var"))
    assert _values(server, "grad_sqr") and all(v > 0 for v in _values(server, "samples_per_s"))

    since = len(server.requests)
    resumed_args = [*args[:1], str(stopped_at + 20), *args[2:]]
    env = {"GPUFLOW_CHECKPOINT_PATH": str(ckpt), "GPUFLOW_RESUME": "1", "GPUFLOW_ATTEMPT": "2"}
    second = [_launch(tmp_path, r, 2, port, server, resumed_args, **env) for r in range(2)]
    try:
        codes = [p.wait(timeout=40) for p in second]
    finally:
        for p in second:
            p.kill() if p.poll() is None else None
    assert codes == [0, 0]
    run2 = _losses(server, since)
    assert run2[0][0] > stopped_at and run2[-1][0] == stopped_at + 20
    assert set(_values(server, "batch_size", since)) == {64.0}
    # The loss continues where it stopped instead of starting over.
    assert run2[0][1] < 0.5 * run1[0][1]
    assert run2[0][1] < 3 * run1[-1][1] + 0.02
    log = (tmp_path / "rank0-2.log").read_text()
    assert f"at step {stopped_at}" in log
    final = torch.load(checkpoint.checkpoint_file(ckpt, 2), weights_only=True)["train"]
    assert not checkpoint.attempt_dir(ckpt, 1).exists()  # pruned once attempt 2 wrote
    assert final["step"] == stopped_at + 20


def test_single_process_learns_and_reports_every_metric(
    tmp_path: Path, server: MetricsServer
) -> None:
    args = ["--steps", "300", "--report-interval-s", "0.05", "--step-sleep-s", "0.001"]
    p = _launch(tmp_path, 0, 1, free_port(), server, args)
    assert p.wait(timeout=30) == 0
    assert {m["name"] for m in server.metrics()} == METRICS
    losses = _losses(server)
    assert losses[-1][0] == 300
    # The student starts near 0.8 (examples/train/train.py TEACHER_GAIN); the first
    # report averages its first few dozen steps; the floor is 0.01.
    assert losses[-1][1] < 0.06
    assert losses[0][1] > 3 * losses[-1][1]
    assert set(_values(server, "batch_size")) == {64.0}
    assert set(_values(server, "gpus")) == {1.0}
    assert all(v > 0 for v in _values(server, "grad_var"))
