"""bench/operator.py at a tiny size on the session's real control plane (its
`--kubeconfig`, so no second control plane starts): 50 DLJobs onto 10 nodes, every
field docs/benchmarks.md quotes printed and consistent with what was asked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuflow.sandbox.controlplane import ControlPlane
from operators.kube import KubeApi, api_client
from tests.operators.real_cluster import ensure_crds, reset

ROOT = Path(__file__).resolve().parents[2]
JOBS, NODES = 50, 10
RUN_TIMEOUT_S = 120


@pytest.fixture
def clean_cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The shared control plane without operator objects, before and after."""
    client = api_client(str(control_plane.kubeconfig))
    try:
        ensure_crds(client)
        reset(KubeApi(client))
        yield control_plane
        reset(KubeApi(client))
    finally:
        client.rest_client.pool_manager.clear()


def field(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text, re.M)
    assert found, f"no line matching {pattern!r} in:\n{text}"
    return found


def test_the_bench_places_every_job_on_the_real_server_and_counts_the_operators_requests(
    clean_cluster: ControlPlane, tmp_path: Path
) -> None:
    cmd = [sys.executable, "bench/operator.py", "--server", "real",
           "--kubeconfig", str(clean_cluster.kubeconfig), "--nodes", str(NODES),
           "--jobs", str(JOBS), "--interval", "1", "--timeout", "60",
           "--log", str(tmp_path / "operator.log")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    assert field(r"^server: (\w+)", out)[1] == "real"
    assert field(r"^setup: (\d+) nodes, (\d+) DLJobs", out).groups() == (str(NODES), str(JOBS))
    placed = field(r"^operator: (\d+)/(\d+) jobs' pods created and bound in ([0-9.]+) s", out)
    assert (int(placed[1]), int(placed[2])) == (JOBS, JOBS)
    rounds = field(r"^round latency .*: (\d+) rounds, ([0-9.]+) s in rounds, mean ([0-9.]+) s", out)
    assert int(rounds[1]) >= 1 and float(rounds[3]) > 0
    requests = field(
        r"^API server requests until then: (\d+), the operator's (\d+)"
        r" \((\d+)/s, ([0-9.]+) a job\), the bench's own (\d+), the control plane's other (\d+)",
        out,
    )
    total, operator, per_s, _, _, other = (float(g) for g in requests.groups())
    # Each job costs the operator at least its pod, its service and its status write.
    assert operator >= 3 * JOBS
    assert operator + other <= total
    assert per_s == pytest.approx(operator / float(placed[3]), rel=0.05, abs=1)
    by_verb = field(r"^  by verb and resource: (.*)$", out)[1]
    # The counter moves as the response is sent, which may be just after the watch's
    # event reached the bench: the last pod or two may not be counted yet.
    assert JOBS - 2 <= int(field(r"\bPOST pods (\d+)", by_verb)[1]) <= JOBS
    assert int(field(r"^operator watches \(open at the end\): (\d+)", out)[1]) >= 1
    assert field(r"^goal: all placed within (\d+) s: (.*)$", out).groups() == ("120", "met")
