"""The sandbox's pod network (gpuflow/sandbox/network.py): pod address blocks, and as
root pods with addresses and namespaces of their own, run by ProcessKubelets."""

from __future__ import annotations

import subprocess

import pytest

from gpuflow.sandbox.network import NetworkError, NodeNetwork, can_isolate, pod_blocks
from operators.kube import KubeApi
from tests.sandbox.conftest import Start, gone, make_pod, wait_phase
from tests.waiting import wait_for


@pytest.mark.parametrize(
    ("nodes", "blocks"),
    [(1, (16, 16)), (2, (16, 16)), (6, (16, 16)), (7, (32, 16)), (14, (32, 15)), (100, (112, 1))],
)
def test_pod_blocks_follow_the_node_addresses(nodes: int, blocks: tuple[int, int]) -> None:
    first, size = pod_blocks(nodes)
    assert (first, size) == blocks
    assert first >= 10 + nodes and first + size * nodes <= 255  # past the nodes, in the /24


def test_too_many_nodes_for_pod_addresses() -> None:
    with pytest.raises(NetworkError, match="no pod addresses"):
        pod_blocks(200)


def test_pod_address_is_reserved_per_uid_in_the_nodes_block() -> None:
    blocks = {"node-0": range(16, 18), "node-1": range(32, 34)}
    net = NodeNetwork("t", True, subnet="10.233.7", pod_octets=blocks)
    first = net.pod_address("node-0", "u1")
    assert first == "10.233.7.16" == net.pod_address("node-0", "u1")  # asked again: same
    assert net.pod_address("node-0", "u2") == "10.233.7.17"
    assert net.pod_address("node-1", "u3") == "10.233.7.32"
    with pytest.raises(NetworkError, match="no free pod address on node-0"):
        net.pod_address("node-0", "u4")
    net.release_pod("u1")  # never attached: nothing to delete, the address is free again
    assert net.pod_address("node-0", "u4") == "10.233.7.16"
    assert net.reserved_address("node-0", "u9") is None


def test_not_isolated_every_pod_is_loopback() -> None:
    net = NodeNetwork("t", False, addresses={"node-0": "127.0.0.1"})
    assert net.attach_pod("node-0", "u1") == net.reserved_address("node-0", "u1") == "127.0.0.1"
    assert net.exec_prefix("node-0", "u1") == []


def _released(net: NodeNetwork, before: dict[str, str]) -> dict[str, str]:
    """The pods' namespaces once one of `before` has left them and is deleted; {}
    until then."""
    left = {uid: slot.netns for uid, slot in net.pods.items()}
    shown = _shown("netns", "list").split()
    released = [ns for uid, ns in before.items() if uid not in left and ns not in shown]
    return left if released else {}


def _shown(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not can_isolate(), reason="network namespaces need root and iproute2")
def test_two_pods_of_one_node_have_their_own_addresses(api: KubeApi, kubelet: Start) -> None:
    """Two pods on node-0 reach a pod on node-1, which sees each one's own address as
    the peer; a deleted pod's namespace goes at once, everything else at teardown."""
    net = NodeNetwork.create(["node-0", "node-1"])
    try:
        serve = (
            "import os, socket; s = socket.create_server((os.environ['POD_IP'], 29500))\n"
            "for _ in range(2):\n"
            "    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n"
        )
        ask = (
            "import os, socket, sys, time\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        c = socket.create_connection((os.environ['MASTER_ADDR'], 29500), 1); break\n"
            "    except OSError: time.sleep(0.05)\n"
            "sys.exit(0 if c.recv(64).decode() == os.environ['POD_IP'] else 5)\n"
        )
        ip_env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        master = [{"name": "MASTER_ADDR", "value": "srv.job.default.svc.cluster.local"}]
        kubelet("node-0", net)
        kubelet("node-1", net)
        api.create_pod("default", make_pod("srv", serve, node="node-1", env=ip_env))
        for name in ("c1", "c2"):
            api.create_pod("default", make_pod(name, ask, node="node-0", env=[*ip_env, *master]))
        c1, c2 = wait_phase(api, "c1", "Succeeded"), wait_phase(api, "c2", "Succeeded")
        srv = wait_phase(api, "srv", "Succeeded")
        node0, node1 = net.address("node-0"), net.address("node-1")
        assert (c1["hostIP"], c2["hostIP"], srv["hostIP"]) == (node0, node0, node1)
        assert len({node0, node1, c1["podIP"], c2["podIP"], srv["podIP"]}) == 5
        own = {uid: slot.netns for uid, slot in net.pods.items()}
        assert len(own) == 3 and all(ns in _shown("netns", "list") for ns in own.values())

        # A pod that has ended is deleted at once by the API server (no grace): its
        # kubelet removes its namespace when the watch tells it the pod is gone.
        api.delete_pod("default", "c1", 30)
        gone(api, "c1", 10)
        left = wait_for("c1's namespace released", lambda: _released(net, own), 10)
        deleted = set(own.values()) - set(left.values())
        assert len(left) == 2 and len(deleted) == 1
    finally:
        net.teardown()
    assert net.tag not in _shown("netns", "list")
    assert net.tag not in _shown("link")
