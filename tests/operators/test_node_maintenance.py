"""Cordon and drain against the real control plane with the operator running:
`kubectl cordon` keeps new work off a node while its jobs run on; a drain set by the
API's code path (api.cluster_mode.node_admin) preempts the node's jobs gracefully, places them
elsewhere and ends once the node is empty."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from api.cluster_mode.node_admin import patch_node
from controller.maintenance import NodeAction
from operators import crd
from operators.nodes import build_cluster
from operators.pods.failure_policy import EXIT_CHECKPOINTED
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.operators.test_kubectl import KUBECTL, kubectl
from tests.waiting import wait_for


def _long(name: str, gpus: int) -> dict[str, Any]:
    job = make_dljob(name, gpus, duration_s=1000.0)
    job["spec"]["expectedDurationSeconds"] = 1000
    return job


def _nodes_of(cluster: RealCluster, job: str) -> set[str]:
    return {p["spec"]["nodeName"] for p in job_pods(cluster.api, job) if not _deleting(p)}


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _events(cluster: RealCluster, job: str, reason: str) -> list[Any]:
    items = cluster.api.core.list_namespaced_event("default").items
    return [e for e in items if e.involved_object.name == job and e.reason == reason]


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
def test_kubectl_cordon_keeps_new_work_off_a_node(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            api.create_dljob("default", _long("keep", 4))
            wait_phases(api, "Running", ["keep"])
            assert _nodes_of(gpu_cluster, "keep") == {"node-0"}
            assert "cordoned" in kubectl(gpu_cluster, "cordon", "node-0")
            view = wait_for(
                "the cordon in the operator's node cache",
                lambda: (v := build_cluster(op.backend.caches.nodes.items())).cordoned_nodes and v,
            )
            assert view.state_of(0) == "cordoned" and not view.down_nodes
            # Best fit puts a 4-GPU job next to "keep"; node-0 is cordoned.
            api.create_dljob("default", _long("new", 4))
            wait_phases(api, "Running", ["new"])
            assert _nodes_of(gpu_cluster, "new") == {"node-1"}
            assert _nodes_of(gpu_cluster, "keep") == {"node-0"}  # ran on
            assert dljob_status(api, "keep")["attempt"] == 1
            # Uncordoned, the node takes work again.
            kubectl(gpu_cluster, "uncordon", "node-0")
            wait_for(
                "the uncordon in the operator's node cache",
                lambda: not build_cluster(op.backend.caches.nodes.items()).cordoned_nodes,
            )
            api.create_dljob("default", _long("back", 4))
            wait_phases(api, "Running", ["back"])
            assert _nodes_of(gpu_cluster, "back") == {"node-0"}
    finally:
        kubelet.stop()


def test_a_drain_preempts_gracefully_and_places_the_job_elsewhere(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, sigterm_s=0.3, sigterm_exit=EXIT_CHECKPOINTED).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", _long("mover", 4))
            wait_phases(api, "Running", ["mover"])
            assert _nodes_of(gpu_cluster, "mover") == {"node-0"}
            first_pods = {p["metadata"]["name"] for p in job_pods(api, "mover")}
            patched = patch_node(api, "node-0", NodeAction.DRAIN, "root", time.time())
            assert patched["spec"]["unschedulable"] is True
            assert patched["metadata"]["annotations"][crd.ANN_NODE_DRAIN].startswith("root at ")
            moved = wait_for(
                "the job to run on node-1",
                lambda: (
                    _nodes_of(gpu_cluster, "mover") == {"node-1"}
                    and dljob_status(api, "mover").get("phase") == "Running"
                ),
                timeout_s=60.0,
            )
            assert moved
            wait_for(
                "the drain to end",
                lambda: (
                    crd.ANN_NODE_DRAIN
                    not in (api.get_node("node-0")["metadata"].get("annotations") or {})
                ),
                timeout_s=60.0,
            )
            wait_for(
                "attempt 1's pods gone (the kubelet ends them after their checkpoint)",
                lambda: not first_pods & {p["metadata"]["name"] for p in job_pods(api, "mover")},
                timeout_s=30.0,
            )
    finally:
        kubelet.stop()
    status = dljob_status(api, "mover")
    assert status["attempt"] == 2 and not status.get("failures")  # checkpointed, not counted
    (drained,) = _events(gpu_cluster, "mover", "PreemptedByDrain")
    assert drained.message == "preempted: node node-0 drained by root"
    assert drained.type == "Normal"  # an admin's drain, not a fault: no Warning
    assert not _events(gpu_cluster, "mover", "WorkerFailed")
    assert not first_pods & {p["metadata"]["name"] for p in job_pods(api, "mover")}
    node = api.get_node("node-0")
    assert node["spec"]["unschedulable"] is True  # drained: still cordoned
    view = build_cluster([node])
    assert view.state_of(0) == "cordoned"
    patch_node(api, "node-0", NodeAction.UNCORDON, "root", time.time())
    assert build_cluster([api.get_node("node-0")]).state_of(0) == "ready"
