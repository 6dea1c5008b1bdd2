"""A ProcessKubelet toward the real control plane (gpuflow/sandbox/kubelet/heartbeat.py): it
registers its Node Ready with its own credentials, which confine it to its own Node,
renews its Lease in kube-node-lease, and when its heartbeats stop the controller
manager's node lifecycle controller marks the Node Unknown and taints it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.controlplane import ControlPlane, ControlPlaneOptions
from gpuflow.sandbox.kubelet.heartbeat import (
    LEASE_NAMESPACE,
    HeartbeatConfig,
    LeaseRenewer,
    NodeHeartbeat,
)
from operators.kube import API_ERRORS, KubeApi, api_client, status_code
from tests.controlplane.fixtures import NEEDS_CONTROL_PLANE
from tests.sandbox.conftest import Start
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, NEEDS_CONTROL_PLANE]
FORBIDDEN = 403


def ready(node: dict[str, Any]) -> dict[str, Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def test_node_registered_ready_by_its_own_kubelet(
    control_plane: ControlPlane, api: KubeApi, kubelet: Start
) -> None:
    kubelet("node-0")
    kubelet("node-2")
    node = api.get_node("node-2")
    assert (ready(node)["status"], ready(node)["reason"]) == ("True", "KubeletReady")
    status = node["status"]
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["allocatable"] == status["capacity"] == {"pods": "110"}
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-2"
    # node-2's credentials are node-2's alone: the Node authorizer and NodeRestriction
    # refuse its writes to another node.
    node2 = KubeApi(api_client(str(control_plane.node_kubeconfig("node-2"))))
    with pytest.raises(API_ERRORS) as refused:
        node2.patch_node("node-0", {"metadata": {"labels": {"stolen": "yes"}}})
    assert status_code(refused.value) == FORBIDDEN
    assert "stolen" not in api.get_node("node-0")["metadata"]["labels"]


def test_lease_renewed_in_kube_node_lease(api: KubeApi, kubelet: Start) -> None:
    kubelet("node-1", heartbeat=HeartbeatConfig(renew_s=0.5))
    first = wait_for("node-1's Lease", lambda: api.get_lease(LEASE_NAMESPACE, "node-1"), 10)
    spec = first["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("node-1", 40)
    owner = first["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", "node-1")

    def renewed() -> str | None:
        lease = api.get_lease(LEASE_NAMESPACE, "node-1") or {}
        renew = str((lease.get("spec") or {}).get("renewTime"))
        return renew if renew > spec["renewTime"] else None

    wait_for("the Lease's renewTime to move", renewed, 10)


@pytest.fixture
def quick_lifecycle(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane of its own whose node lifecycle controller gives up on a node
    after 4 s without heartbeats (the default 50 s would make a slow test)."""
    options = ControlPlaneOptions(
        nodes=("node-0",), node_monitor_period_s=1.0, node_monitor_grace_period_s=4.0
    )
    with ControlPlane(tmp_path / "cp", options=options) as cp:
        yield cp


def test_stopped_heartbeats_make_the_node_unknown(
    quick_lifecycle: ControlPlane, kubelet: Start
) -> None:
    admin = KubeApi(api_client(str(quick_lifecycle.kubeconfig)))
    k = kubelet("node-0", heartbeat=HeartbeatConfig(renew_s=0.5), plane=quick_lifecycle)

    def untainted() -> bool:
        # The controller removes the not-ready taint admission put on the new Node
        # once it has seen it Ready: it is watching this node.
        return not (admin.get_node("node-0").get("spec") or {}).get("taints")

    wait_for("the node lifecycle controller to accept node-0", untainted, 30)
    assert ready(admin.get_node("node-0"))["status"] == "True"
    k.heartbeat.stop()
    unknown = wait_for(
        "node-0 Unknown",
        lambda: (c := ready(admin.get_node("node-0"))).get("status") == "Unknown" and c,
        40,
    )
    assert unknown["reason"] == "NodeStatusUnknown"

    def unreachable() -> bool:
        taints = admin.get_node("node-0")["spec"].get("taints") or []
        return "node.kubernetes.io/unreachable" in {t["key"] for t in taints}

    assert wait_for("the unreachable taint", unreachable, 30)


def renew_time(api: KubeApi, node: str) -> str:
    lease = api.get_lease(LEASE_NAMESPACE, node)
    assert lease is not None, node
    return str(lease["spec"]["renewTime"])


def test_one_lease_renewer_keeps_many_nodes_leases(api: KubeApi) -> None:
    """The lighter emulation bench/operator.py runs for 2,000 nodes: each registered
    once with the node agent's metadata, then one thread renewing every Lease."""
    names = ["renewer-0", "renewer-1", "renewer-2"]
    renewer = LeaseRenewer(api, HeartbeatConfig(renew_s=0.3))
    meta = {"labels": {"rack": "r1"}, "annotations": {"gpus": "8 x V100"}}
    try:
        for name in names:
            heartbeat = NodeHeartbeat(api, name, "127.0.0.1", devices={"nvidia.com/gpu": "8"})
            node = heartbeat.register(meta)
            labels = node["metadata"]["labels"]
            assert (labels["rack"], labels["kubernetes.io/hostname"]) == ("r1", name)
            assert node["metadata"]["annotations"] == {"gpus": "8 x V100"}
            assert ready(node)["status"] == "True"
            assert node["status"]["capacity"] == {"pods": "110", "nvidia.com/gpu": "8"}
            renewer.add(node)
        first = {name: renew_time(api, name) for name in names}
        renewer.start()
        wait_for(
            "every Lease's renewTime to move",
            lambda: all(renew_time(api, name) > first[name] for name in names),
            10,
        )
    finally:
        renewer.stop()
        for name in names:
            api.core.delete_node(name)
    assert renewer.renewals >= len(names) and renewer.failures == 0
    assert 0 < renewer.longest_gap_s < 5
