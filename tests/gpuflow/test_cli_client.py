"""`gpuflow jobs/submit` against a real `gpuflow serve`: the reason column, 4xx as
`field: message` lines; and `error_lines` on the detail shapes the API returns."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuflow.api_output import error_lines, field_path
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _gpuflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuflow.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env=env,
        timeout=TIMEOUT_S,
    )


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A local-mode server on a 1x4 cluster, its clock 20 times the wall clock: a round
    each 3 s, a job of 10 simulated hours holds its GPUs through the test."""
    env = {**os.environ, "GPUFLOW_DATA_DIR": str(tmp_path)}
    env.pop("GPUFLOW_DATABASE_URL", None)
    port = _free_port()
    cmd = [sys.executable, "-m", "gpuflow.cli", "serve", "-c", "1x4", "--port", str(port)]
    cmd += ["--time-scale", "20"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for("the server to answer", up, timeout_s=60, every_s=0.2)
        created = _gpuflow("admin", "create", "root", env=env)
        assert created.returncode == 0, created.stderr
        env["GPUFLOW_URL"] = url
        env["GPUFLOW_TOKEN"] = created.stdout.strip().splitlines()[-1]
        yield url, env
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT_S)


@pytest.mark.slow
def test_jobs_lists_why_a_job_waits_and_a_422_is_field_lines(
    server: tuple[str, dict[str, str]],
) -> None:
    _, env = server
    for name in ("first", "second"):
        done = _gpuflow("submit", "-g", "4", "--duration", "36000", "-n", name, env=env)
        assert done.returncode == 0, done.stderr

    def second_waits() -> str | None:
        out = _gpuflow("jobs", env=env).stdout
        line = next((ln for ln in out.splitlines() if " second " in ln), "")
        return line if "Queued" in line and line.split("second", 1)[1].strip() else None

    listing = _gpuflow("jobs", env=env).stdout.splitlines()
    assert listing[0].split() == ["ID", "STATUS", "GPUS", "PROGRESS", "NAME", "REASON"]
    try:
        waiting = wait_for("the second job's reason", second_waits, timeout_s=60, every_s=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; gpuflow jobs: {_gpuflow('jobs', env=env).stdout}") from exc
    # The reason sits in its column, after the name.
    assert waiting.index("second") < len(waiting) - len("second") - 2

    refused = _gpuflow("submit", "-g", "5", "--duration", "10", env=env)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    lines = refused.stderr.splitlines()
    assert lines and all(ln.startswith("gpuflow: error: num_gpus: ") for ln in lines), lines


def test_unreachable_server_is_one_line() -> None:
    env = {**os.environ, "GPUFLOW_URL": f"http://127.0.0.1:{_free_port()}"}
    done = _gpuflow("jobs", env=env)
    assert done.returncode == 1
    assert done.stderr.startswith("gpuflow: error: cannot reach the server: ")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("loc", "shown"),
    [
        (["body", "num_gpus"], "num_gpus"),
        (["body", "clusters", 0], "clusters[0]"),
        (
            ["body", "policy_options", "tiresias", "starve_limit"],
            "policy_options.tiresias.starve_limit",
        ),
        (["query", "limit"], "limit"),
        (["body"], "body"),
        ([], "request"),
    ],
)
def test_field_path_joins_loc_with_dots_and_brackets(loc: list[object], shown: str) -> None:
    assert field_path(loc) == shown


def test_error_lines_one_per_422_error_and_one_otherwise() -> None:
    detail = [
        {"loc": ["body", "num_gpus"], "msg": "Input should be\n greater than 0", "type": "x"},
        {"loc": ["body", "clusters", 2], "msg": "unknown cluster 'x'", "type": "value_error"},
    ]
    assert error_lines(422, detail) == [
        "num_gpus: Input should be greater than 0",
        "clusters[2]: unknown cluster 'x'",
    ]
    assert error_lines(409, "job is already Succeeded") == ["HTTP 409: job is already Succeeded"]
    trace = {"line": 3, "field": "num_gpus", "message": "not a number: 'x'"}
    assert error_lines(422, trace) == ["num_gpus: not a number: 'x'"]
    assert error_lines(401, "x" * 5000)[0].endswith("...")
    assert len(error_lines(401, "x" * 5000)[0]) < 400
