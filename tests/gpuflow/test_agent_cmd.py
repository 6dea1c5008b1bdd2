"""`gpuflow agent run` for a node the cluster does not have: one line and exit code 2,
run as a user runs it (a process, the session's real control plane: `kube_cluster`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.operators.real_cluster import RealCluster

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "controller" / "presets" / "dgx1-v100.yaml"
TIMEOUT_S = 60


def _agent(server: RealCluster, node: str) -> subprocess.CompletedProcess[str]:
    argv = ["agent", "run", "--once", "--no-enforce-bandwidth"]
    argv += ["--kubeconfig", str(server.kubeconfig), "--topology-file", str(TOPOLOGY)]
    return subprocess.run(
        [sys.executable, "-m", "gpuflow.cli", *argv, "--node-name", node],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=TIMEOUT_S,
    )


def test_an_agent_for_a_missing_node_is_one_line_and_exit_2(kube_cluster: RealCluster) -> None:
    proc = _agent(kube_cluster, "ghost")
    assert proc.returncode == 2
    assert proc.stderr == (
        "gpuflow agent: error: node 'ghost' not found "
        "(--node-name or NODE_NAME must name a Node of the cluster)\n"
    )


def test_an_agent_for_a_node_that_exists_publishes(kube_cluster: RealCluster) -> None:
    api = kube_cluster.api
    api.create_node({"metadata": {"name": "n0"}})
    proc = _agent(kube_cluster, "n0")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert api.get_node("n0")["metadata"]["labels"]["gpuflow.dev/gpu.count"] == "8"
