"""`gpuflow sandbox run` end to end: the API server, agents, operator and kubelets in
one process, the jobs' workers as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuflow.sandbox.controlplane import BIN_ENV, BUILD_HINT
from gpuflow.sandbox.network import can_isolate

GPUFLOW = [sys.executable, "-m", "gpuflow.cli"]
KEYS = ["name", "status", "restarts", "steps", "batch_sizes", "measured_rate_ips", "jct_s"]


def dljob(name: str, code: str, gpus: int) -> dict[str, object]:
    return {
        "apiVersion": "gpuflow.dev/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "ignored",
            "command": ["python", "-c", code],
            "gpus": gpus,
            "checkpoint": {"path": "/ckpt", "gracePeriodSeconds": 2},
        },
    }


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUFLOW, "sandbox", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )


def test_run_json_one_job_succeeds(tmp_path: Path) -> None:
    code = "import os, sys; sys.exit(0 if os.environ['WORLD_SIZE'] == '1' else 9)"
    job = tmp_path / "job.yaml"
    bad = dljob("bad", "raise SystemExit(3)", 1)
    rule = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}
    bad["spec"]["podFailurePolicy"] = {"rules": [rule]}  # type: ignore[index]
    job.write_text(yaml.safe_dump_all([dljob("ok", code, 2), bad]))
    proc = run(["--nodes", "1x2", "--json", str(job), "--timeout", "60"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == ["jobs", "wall_s", "control_plane"]
    assert out["control_plane"]["kubernetes"].startswith("v1.")
    by_name = {j["name"]: j for j in out["jobs"]}
    assert [list(j) for j in out["jobs"]] == [KEYS, KEYS]
    ok = by_name["ok"]
    assert (ok["status"], ok["restarts"], ok["steps"], ok["batch_sizes"]) == (
        "Succeeded",
        0,
        None,
        [],
    )
    assert ok["measured_rate_ips"] is None and 0 <= ok["jct_s"] < 60
    assert (by_name["bad"]["status"], by_name["bad"]["restarts"]) == ("Failed", 0)
    assert out["wall_s"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2y4", "job.yaml"], "--nodes '2y4'"),
        (["--nodes", "1x2", "missing.yaml"], "missing.yaml: No such file"),
        (["--nodes", "1x2", "--policy", "nope", "job.yaml"], "unknown policy 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(dljob("j", "pass", 1)))
    proc = run(args, tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr


@pytest.mark.skipif(not can_isolate(), reason="network namespaces need root and iproute2")
def test_two_node_job_meets_at_master_addr(tmp_path: Path) -> None:
    """Rank 0 listens on MASTER_ADDR:MASTER_PORT in node-0's namespace, rank 1 connects
    from node-1's: the headless service's DNS name reached the rank-0 pod."""
    code = (
        "import os, socket, sys, time\n"
        "addr = (os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']))\n"
        "if os.environ['RANK'] == '0':\n"
        "    s = socket.create_server(addr); c, _ = s.accept(); c.sendall(b'hi'); sys.exit(0)\n"
        "for _ in range(300):\n"
        "    try: c = socket.create_connection(addr, timeout=1); break\n"
        "    except OSError: time.sleep(0.05)\n"
        "sys.exit(0 if c.recv(2) == b'hi' else 6)\n"
    )
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(dljob("ddp", code, 4)))
    args = ["sandbox", "run", "--nodes", "2x2", "--json", str(job), "--timeout", "60", "-v"]
    proc = subprocess.Popen(
        [*GPUFLOW, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["jobs"][0]["status"] == "Succeeded"
    tag = f"gfs{proc.pid % 10000:04d}"  # network.py's names start with it
    assert f"netns={tag}" in stderr  # the nodes had namespaces
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert tag not in netns and tag not in links  # and they are gone, veths and bridge too


@pytest.mark.parametrize("action", ["up", "run"])
def test_missing_binaries_is_one_line_how_to_build_them(tmp_path: Path, action: str) -> None:
    """Nothing starts: the one line is BinariesMissing's, naming the folder looked in."""
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(dljob("j", "pass", 1)))
    empty = tmp_path / "no-binaries"
    empty.mkdir()
    argv = [*GPUFLOW, "sandbox", action, "--nodes", "1x2"]
    argv += ["job.yaml"] if action == "run" else []
    env = {**os.environ, BIN_ENV: str(empty)}
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"gpuflow: error: no etcd in {empty}: {BUILD_HINT}\n"
