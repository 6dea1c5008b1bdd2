"""Nodes, the cluster summary and the policy routes over local mode's LiveCluster."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.builders import auth, submit, wait_for

API = "/api/v1"


def test_nodes_and_summary_show_running_jobs(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, num_gpus=4, duration_s=1e6)
    summary = wait_for(
        lambda: (s := client.get(f"{API}/cluster", headers=alice).json())["running"] and s
    )
    assert summary["gpus"] == 8 and summary["gpus_allocated"] == 4 and summary["policy"] == "fifo"
    nodes = client.get(f"{API}/nodes", headers=alice).json()
    assert nodes["count"] == 2
    assert sum(n["gpus_allocated"] for n in nodes["data"]) == 4
    assert [job["id"]] in [n["jobs"] for n in nodes["data"]]


def test_only_admins_switch_the_policy(client: TestClient, admin: dict[str, str]) -> None:
    alice = auth(client, "alice", "vision")
    names = {p["name"] for p in client.get(f"{API}/policies", headers=alice).json()["data"]}
    assert {"fifo", "srtf"} <= names
    assert (
        client.put(f"{API}/policies/active", json={"name": "srtf"}, headers=alice).status_code
        == 403
    )
    r = client.put(f"{API}/policies/active", json={"name": "srtf"}, headers=admin)
    assert r.status_code == 200 and r.json()["active"]
    assert client.get(f"{API}/policies/active", headers=alice).json()["name"] == "srtf"
    r = client.put(f"{API}/policies/active", json={"name": "nope"}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"]
