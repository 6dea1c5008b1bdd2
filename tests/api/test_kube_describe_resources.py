"""Cluster mode's cluster view counts CPU and memory as the operator does: a node
whose free CPU holds no waiting DLJob's worker pod has its idle GPUs fragmented."""

from __future__ import annotations

from typing import Any

from api.cluster_mode.describe import describe_kube
from operators.nodes import build_cluster
from tests.operators.builders import make_dljob, make_node_body


def node(name: str, cpu: str) -> dict[str, Any]:
    body = make_node_body(name)
    body["status"] = {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"}}
    return body


def dljob(name: str, gpus: int, cpu: str, status: dict[str, Any]) -> dict[str, Any]:
    obj = make_dljob(name, gpus, requests={"cpu": cpu, "memory": "1Gi"})
    obj["metadata"].update({"uid": f"u-{name}", "creationTimestamp": "2027-01-15T08:00:00Z"})
    obj["status"] = status
    return obj


def running(name: str, gpus: int, cpu: str, node_name: str) -> dict[str, Any]:
    shares = [{"node": node_name, "gpu": g, "fraction": 1.0} for g in range(gpus)]
    return dljob(name, gpus, cpu, {"phase": "Running", "allocation": {"shares": shares}})


def summary(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> tuple[int, int]:
    view = build_cluster(nodes)
    out = describe_kube(view, nodes, jobs, 0.0, gpus=False).summary
    return out.gpus_free, out.fragmentation


def test_a_node_out_of_cpu_strands_its_idle_gpus() -> None:
    nodes = [node("node-0", "16"), node("node-1", "16")]
    # node-0: 2 GPUs busy and 14 of its 16 CPUs; a waiting 1-GPU job asks 4 CPUs
    busy = running("busy", 2, "14", "node-0")
    wait = dljob("wait", 1, "4", {"phase": "Queued"})
    assert summary(nodes, [busy, wait]) == (14, 6)
    # A waiting pod asking 2 CPUs fits node-0 again: nothing stranded.
    small = dljob("small", 1, "2", {"phase": "Queued"})
    assert summary(nodes, [busy, small]) == (14, 0)
    # Both wait: the small one can use node-0, so its GPUs are not fragmented.
    assert summary(nodes, [busy, wait, small]) == (14, 0)


def test_gpu_sizes_and_cpu_count_together() -> None:
    nodes = [node("node-0", "16"), node("node-1", "16")]
    busy = running("busy", 4, "14", "node-0")
    other = running("other", 4, "2", "node-1")
    # a 4-GPU, 4-CPU job: node-0's 4 idle GPUs are stranded by CPU, node-1's 4 fit
    assert summary(nodes, [busy, other, dljob("w", 4, "4", {"phase": "Queued"})]) == (8, 4)
    # a 5-GPU job fits neither node's 4 free GPUs: all 8 are fragmented
    assert summary(nodes, [busy, other, dljob("w", 5, "1", {"phase": "Queued"})]) == (8, 8)


def test_nodes_without_allocatable_never_strand() -> None:
    nodes = [make_node_body("node-0"), make_node_body("node-1")]
    busy = running("busy", 2, "14", "node-0")
    assert summary(nodes, [busy, dljob("wait", 1, "64", {"phase": "Queued"})]) == (14, 0)
