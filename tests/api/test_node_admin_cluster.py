"""Cordon, drain and uncordon over REST in cluster mode: the API patches the Node in
the session's real control plane (api.cluster_mode.node_admin) and GET /nodes follows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.settings import Settings
from operators import crd
from tests.api.builders import auth, wait_for
from tests.api.test_cluster_mode import _settings, service
from tests.operators.real_cluster import RealCluster

API = "/api/v1"


@pytest.fixture
def settings(tmp_path: Path, kube_cluster: RealCluster) -> Settings:
    for name in ("node-0", "node-1"):
        kube_cluster.add_node(name)
    return _settings(tmp_path, kube_cluster)


def _states(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    return {
        n["name"]: n["state"] for n in client.get(f"{API}/nodes", headers=headers).json()["data"]
    }


def test_the_api_cordons_drains_and_uncordons_the_node(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    kube = kube_cluster.api
    with service(settings) as client:
        root = auth(client, "root", "ops", "admin")
        alice = auth(client, "alice", "vision")
        wait_for(lambda: _states(client, alice) == {"node-0": "ready", "node-1": "ready"})
        r = client.post(f"{API}/nodes/node-0/cordon", headers=alice)
        assert r.status_code == 403
        r = client.post(f"{API}/nodes/nowhere/cordon", headers=root)
        assert r.status_code == 404 and "nowhere" in r.json()["detail"]
        assert not (kube.get_node("node-0").get("spec") or {}).get("unschedulable")

        r = client.post(f"{API}/nodes/node-0/cordon", headers=root)
        assert r.status_code == 200 and r.json()["state"] == "cordoned"
        assert kube.get_node("node-0")["spec"]["unschedulable"] is True
        r = client.post(f"{API}/nodes/node-1/drain", headers=root)
        assert r.status_code == 200 and r.json()["state"] == "draining"
        node = kube.get_node("node-1")
        assert node["spec"]["unschedulable"] is True
        assert node["metadata"]["annotations"][crd.ANN_NODE_DRAIN].startswith("root at ")
        wait_for(lambda: _states(client, alice) == {"node-0": "cordoned", "node-1": "draining"})

        r = client.post(f"{API}/nodes/node-1/uncordon", headers=root)
        assert r.status_code == 200 and r.json()["state"] == "ready"
        node = kube.get_node("node-1")
        assert not (node.get("spec") or {}).get("unschedulable")
        assert crd.ANN_NODE_DRAIN not in (node["metadata"].get("annotations") or {})
        wait_for(lambda: _states(client, alice) == {"node-0": "cordoned", "node-1": "ready"})
        summary = client.get(f"{API}/cluster", headers=alice).json()
        assert summary["nodes"] == 2 and summary["gpus"] == 16
