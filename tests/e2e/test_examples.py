"""Issue 26's CI test: `gpuflow sandbox run --nodes 2x4 --policy pollux
examples/train/*.yaml --json` on the real control plane (etcd, kube-apiserver and
kube-controller-manager from controlplane/build.sh): every example job Succeeded with
its steps and a measured rate, and the JSON names the release the binaries were built
from (controlplane/go.mod's k8s.io/kubernetes)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.controlplane.fixtures import NEEDS_CONTROL_PLANE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "train").glob("*.yaml"))
GO_MOD = ROOT / "controlplane" / "go.mod"
pytestmark = [pytest.mark.slow, NEEDS_CONTROL_PLANE]


def steps_of(path: Path) -> tuple[str, int]:
    """The example's DLJob name and the --steps its worker runs."""
    body = yaml.safe_load(path.read_text())
    command = body["spec"]["template"]["spec"]["containers"][0]["command"]
    steps = next(int(a.split("=", 1)[1]) for a in command if a.startswith("--steps="))
    return body["metadata"]["name"], steps


def test_examples_with_pollux_on_two_nodes(tmp_path: Path) -> None:
    assert len(EXAMPLES) >= 2, EXAMPLES
    argv = [sys.executable, "-m", "gpuflow.cli", "sandbox", "run", "--nodes", "2x4"]
    argv += ["--policy", "pollux", *map(str, EXAMPLES), "--json"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    release = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", GO_MOD.read_text(), re.MULTILINE)
    assert release is not None
    assert out["control_plane"]["kubernetes"] == release.group(1)
    assert re.fullmatch(r"etcd 3\.\d+\.\d+", out["control_plane"]["store"])
    got = {j["name"]: j for j in out["jobs"]}
    assert got.keys() == {steps_of(p)[0] for p in EXAMPLES}
    for path in EXAMPLES:
        name, steps = steps_of(path)
        job = got[name]
        assert (job["status"], job["steps"]) == ("Succeeded", steps), job
        assert job["measured_rate_ips"] is not None and job["measured_rate_ips"] > 0, job
