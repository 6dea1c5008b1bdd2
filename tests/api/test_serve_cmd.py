"""`gpuflow serve/submit/jobs/cancel/admin create` end to end, on a real uvicorn server."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuflow import serve_cmd
from tests.api.builders import wait_for

# Until gpuflow.cli registers them, the commands run from their own parser.
SERVE = (
    "import sys, argparse; from gpuflow import serve_cmd; p = argparse.ArgumentParser(); "
    "serve_cmd.add_parsers(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); "
    "sys.exit(a.func(a))"
)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    serve_cmd.add_parsers(parser.add_subparsers())
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-c",
        SERVE,
        "serve",
        "--cluster",
        "1x4",
        "--port",
        str(port),
        "--time-scale",
        "200",
        "--data-dir",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, timeout_s=30, every_s=0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_local_mode_runs_jobs_submitted_from_the_cli(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["admin", "create", "root", "--data-dir", str(tmp_path)]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert run(["admin", "create", "root", "--data-dir", str(tmp_path)]) == 2  # exists
    opts = ["--url", server, "--token", token, "--json"]
    assert run(["submit", *opts, "--gpus", "2", "--duration", "20", "--model", "bert"]) == 0
    job = json.loads(capsys.readouterr().out)

    def finished() -> bool:
        assert run(["jobs", *opts, "--status", "Succeeded"]) == 0
        return bool(json.loads(capsys.readouterr().out)["count"] == 1)

    wait_for(finished, timeout_s=30, every_s=0.2)
    assert run(["cancel", *opts, job["id"]]) == 1  # already finished: 409
    assert "HTTP 409" in capsys.readouterr().err
    assert run(["jobs", "--url", server, "--token", "gf_bad"]) == 1
    assert run(["submit", *opts, "--gpus", "2"]) == 2  # no work given


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_bad_port_is_refused_before_anything_starts(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(["serve", f"--port={port}"])
    assert exit_info.value.code == 2
    assert "error: argument --port: " in capsys.readouterr().err.splitlines()[-1]
