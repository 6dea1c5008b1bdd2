"""The sandbox's gpuflow service (service.py) and the figures `sandbox run` takes from
status.train (cluster.py `train_figures`), without a sandbox."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.jobs import train_figures
from gpuflow.sandbox.service import ApiService, ServiceError, service_env


def test_service_env_drops_the_callers_gpuflow_settings(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "GPUFLOW_DATABASE_URL": "postgresql://prod", "GPUFLOW_BROKER_URL": "x"}
    env = service_env(base, tmp_path / "api", tmp_path / "kubeconfig", 1.0)
    assert env["PATH"] == "/bin" and "GPUFLOW_BROKER_URL" not in env
    assert env["GPUFLOW_DATABASE_URL"] == f"sqlite:///{tmp_path}/api/gpuflow.db"
    assert env["GPUFLOW_KUBECONFIG"] == str(tmp_path / "kubeconfig")
    assert env["GPUFLOW_TRAIN_SUMMARY_INTERVAL_S"] == "1.0"


def test_a_service_that_exits_is_an_error_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "api.log"
    log.write_text("INFO: starting\nERROR: database is locked\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    service = ApiService("127.0.0.1", 1, tmp_path, log, proc)
    with pytest.raises(ServiceError, match=r"exited \(3\): INFO: starting \| ERROR: database"):
        service.wait_healthy(5.0)
    service.stop()  # already gone: nothing to do


def test_stop_kills_a_service_that_ignores_sigterm(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr("gpuflow.sandbox.service.STOP_GRACE_S", 0.2)
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1)\n"
    code += "sys.stdout.flush(); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"1\n"  # SIGTERM ignored now
    ApiService("127.0.0.1", 1, tmp_path, tmp_path / "api.log", proc).stop()
    proc.stdout.close()
    assert proc.returncode == -9


THROUGHPUT = [
    {"gpus": 2, "batchSize": 128, "samplesPerSecond": 480.0, "steps": 2},
    {"gpus": 2, "batchSize": 64, "samplesPerSecond": 320.0, "steps": 2},
]


@pytest.mark.parametrize(
    ("train", "expected"),
    [
        ({}, (None, [], None)),
        ({"step": 7, "batchSize": 32}, (7, [32], None)),  # no samples/s yet
        (
            {"step": 4, "batchSize": 128, "samplesPerSecond": 512.0, "throughput": THROUGHPUT},
            (4, [64, 128], 4.0),
        ),
        # Back at a smaller size the throughput table has not seen yet: still listed.
        (
            {"step": 9, "batchSize": 32, "samplesPerSecond": 96.0, "throughput": THROUGHPUT},
            (9, [32, 64, 128], 3.0),
        ),
    ],
)
def test_train_figures(train: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert train_figures(train) == expected
