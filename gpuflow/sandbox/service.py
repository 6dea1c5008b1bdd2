"""The gpuflow service (REST API, job database) of a sandbox, as a subprocess.

cluster.py `Sandbox.up` starts it with `ApiService.start` once the Kubernetes API
server, the CRD and the network exist, waits for it with `wait_healthy` before the
operator starts, and `stop`s it at teardown (also on errors). It is `gpuflow serve`
in cluster mode (api/settings.py): GPUFLOW_KUBECONFIG the sandbox's kubeconfig, its
own SQLite database under `<dir>/api/` (which `serve` migrates to head on start),
status.train written at most every `train_summary_interval_s`. A subprocess and not
an import: gpuflow.sandbox never imports api (import-linter), and the service keeps
its own event loop, threads and logging. Every GPUFLOW_* variable of this process is
left out of its environment, so that a user's GPUFLOW_DATABASE_URL or
GPUFLOW_BROKER_URL never points a sandbox at a real database or broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuflow.sandbox.processes import ProcessHook, log_tail, start_process, stop_process

API_PREFIX = "/api/v1"  # api.app's router prefix: the REST root the pods are given
HEALTH_PATH = "/healthz"  # api.app: answers once uvicorn serves (after the backend started)
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL: uvicorn's graceful shutdown is quick when idle
IMAGE = "sandbox"  # GPUFLOW_KUBE_IMAGE for REST jobs that name none: the kubelet ignores it


class ServiceError(RuntimeError):
    """The service exited or did not answer in time; the message ends with its log's tail."""


def free_port(host: str) -> int:
    """A TCP port free on `host` now (the service binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def service_env(
    base: Mapping[str, str], data_dir: Path, kubeconfig: Path, summary_interval_s: float
) -> dict[str, str]:
    """The service's environment: `base` without GPUFLOW_*, then the sandbox's settings."""
    env = {k: v for k, v in base.items() if not k.startswith("GPUFLOW_")}
    env.update(
        GPUFLOW_KUBECONFIG=str(kubeconfig),
        GPUFLOW_DATA_DIR=str(data_dir),
        GPUFLOW_DATABASE_URL=database_url(data_dir),
        GPUFLOW_KUBE_NAMESPACE="default",
        GPUFLOW_KUBE_IMAGE=IMAGE,
        GPUFLOW_TRAIN_SUMMARY_INTERVAL_S=str(summary_interval_s),
    )
    return env


def database_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'gpuflow.db'}"


@dataclass
class ApiService:
    """One `gpuflow serve` process and where it listens."""

    host: str
    port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def root(self) -> str:
        """Where the service listens (GPUFLOW_URL of the gpuflow client commands)."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The REST root (`--api-url` of the operator, GPUFLOW_API_URL of the pods)."""
        return self.root + API_PREFIX

    @property
    def database_url(self) -> str:
        return database_url(self.data_dir)

    @classmethod
    def start(
        cls,
        host: str,
        directory: Path,
        kubeconfig: Path,
        summary_interval_s: float,
        on_start: ProcessHook | None = None,
    ) -> ApiService:
        """Run `gpuflow serve` on `host` and a free port, its log in `<directory>/api.log`."""
        data_dir = directory / "api"
        data_dir.mkdir(parents=True, exist_ok=True)
        port = free_port(host)
        log_path = directory / "api.log"
        cmd = [sys.executable, "-m", "gpuflow.cli", "serve", "--host", host, "--port", str(port)]
        env = service_env(os.environ, data_dir, kubeconfig, summary_interval_s)
        # Stopped by the sandbox in its turn, after the operator.
        process = start_process(cmd, log_path, env, on_start)
        return cls(host, port, data_dir, log_path, process)

    def wait_healthy(self, timeout_s: float) -> None:
        """Return once GET /healthz answers 200; ServiceError if the process exits or
        `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        health = self.root + HEALTH_PATH
        while True:
            if self.process.poll() is not None:
                raise ServiceError(f"the API exited ({self.process.returncode}){self._tail()}")
            try:
                with urllib.request.urlopen(health, timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ServiceError(f"the API did not answer in {timeout_s:.0f} s{self._tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.process, STOP_GRACE_S)

    def _tail(self) -> str:
        return log_tail(self.log_path)
