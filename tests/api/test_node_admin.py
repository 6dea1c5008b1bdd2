"""An admin cordons, drains and uncordons a node over REST, in local mode (LiveCluster),
on PostgreSQL and SQLite: jobs move, events name the node and the admin."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth, submit, wait_for

API = "/api/v1"


@pytest.fixture(params=["postgresql", "sqlite"])
def any_client(request: pytest.FixtureRequest) -> TestClient:
    name = "client" if request.param == "postgresql" else "sqlite_client"
    found: TestClient = request.getfixturevalue(name)
    return found


def _job(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"{API}/jobs/{job_id}", headers=headers).json()
    return body


def _states(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    nodes = client.get(f"{API}/nodes", headers=headers).json()["data"]
    return {n["name"]: n["state"] for n in nodes}


def test_an_admin_drains_a_node_and_its_job_moves(any_client: TestClient) -> None:
    client = any_client
    root = auth(client, "root", "ops", "admin")
    alice = auth(client, "alice", "vision")
    first = submit(client, alice, num_gpus=4, duration_s=1e6)
    running = wait_for(lambda: (j := _job(client, alice, first["id"]))["status"] == "Running" and j)
    node = running["nodes"]
    other = next(n for n in _states(client, alice) if n != node)
    assert _states(client, alice) == {node: "ready", other: "ready"}

    r = client.post(f"{API}/nodes/{node}/drain", headers=alice)
    assert r.status_code == 403 and r.json()["detail"] == "admin only"
    r = client.post(f"{API}/nodes/nowhere/drain", headers=root)
    assert r.status_code == 404 and "nowhere" in r.json()["detail"]

    r = client.post(f"{API}/nodes/{node}/drain", headers=root)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == node and r.json()["state"] == "cordoned"
    assert r.json()["jobs"] == []  # drained at once in local mode
    moved = wait_for(lambda: (j := _job(client, alice, first["id"]))["nodes"] == other and j)
    assert moved["status"] == "Running" and moved["restarts"] == 1
    events = client.get(f"{API}/jobs/{first['id']}/events", headers=alice).json()["data"]
    kinds = [(e["kind"], e["detail"]) for e in events]
    assert ("preempted", f"node {node} drained by root") in kinds
    assert kinds.index(("preempted", f"node {node} drained by root")) < len(kinds) - 1
    assert kinds[-1] == ("started", "restart 1")
    assert [k for k, _ in kinds].count("preempted") == 1  # the ticker adds no second one
    assert _states(client, alice) == {node: "cordoned", other: "ready"}

    # Cordoned: a job that only the drained node could hold waits.
    second = submit(client, alice, num_gpus=4, duration_s=1e6)
    wait_for(lambda: _job(client, alice, second["id"])["reason_code"] == "InsufficientGpus")
    assert _job(client, alice, second["id"])["status"] == "Queued"
    r = client.post(f"{API}/nodes/{node}/uncordon", headers=root)
    assert r.status_code == 200 and r.json()["state"] == "ready"
    placed = wait_for(lambda: (j := _job(client, alice, second["id"]))["nodes"] == node and j)
    assert placed["status"] == "Running"
    assert _job(client, alice, first["id"])["nodes"] == other  # never moved back


def test_a_cordon_keeps_running_jobs_and_the_summary_works(client: TestClient) -> None:
    root = auth(client, "root", "ops", "admin")
    job = submit(client, root, num_gpus=2, duration_s=1e6)
    running = wait_for(lambda: (j := _job(client, root, job["id"]))["status"] == "Running" and j)
    r = client.post(f"{API}/nodes/{running['nodes']}/cordon", headers=root)
    assert r.status_code == 200
    assert r.json()["state"] == "cordoned" and r.json()["jobs"] == [job["id"]]
    # Best fit would put this job next to the first; cordoned, that node takes nothing.
    second = submit(client, root, num_gpus=2, duration_s=1e6)
    placed = wait_for(lambda: (j := _job(client, root, second["id"]))["nodes"] and j)
    assert placed["nodes"] != running["nodes"]
    assert _job(client, root, job["id"])["restarts"] == 0
    summary = client.get(f"{API}/cluster", headers=root).json()
    assert summary["running"] == 2 and summary["gpus_allocated"] == 4


def test_without_a_backend_node_admin_is_503(sqlite_settings: Settings) -> None:
    with TestClient(create_app(sqlite_settings.model_copy(update={"live": False}))) as client:
        root = auth(client, "root", "ops", "admin")
        r = client.post(f"{API}/nodes/n0/cordon", headers=root)
        assert r.status_code == 503 and r.json()["detail"] == "no cluster backend running"
        assert r.headers["Retry-After"] == "5"
