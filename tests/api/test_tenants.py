"""Tenancy: another tenant's job is a 404 for reads, cancels, events and metrics."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.builders import auth, submit

JOBS = "/api/v1/jobs"


def test_another_tenants_job_is_refused_everywhere(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    mallory = auth(client, "mallory", "nlp")
    job = submit(client, alice, duration_s=1e6)
    jid = job["id"]
    assert client.get(f"{JOBS}/{jid}", headers=mallory).status_code == 404
    assert client.get(f"{JOBS}/{jid}/events", headers=mallory).status_code == 404
    assert client.get(f"{JOBS}/{jid}/reason", headers=mallory).status_code == 404
    assert client.get(f"{JOBS}/{jid}/metrics", headers=mallory).status_code == 404
    assert client.post(f"{JOBS}/{jid}/cancel", headers=mallory).status_code == 404
    token = mallory["Authorization"].removeprefix("Bearer ")
    metrics = {"metrics": [{"name": "loss", "value": 1.0}]}
    r = client.post(f"{JOBS}/{jid}/metrics", json=metrics, headers={"X-Job-Token": token})
    assert r.status_code == 404
    assert client.get(JOBS, headers=mallory).json()["count"] == 0
    assert client.get(JOBS, params={"tenant": "vision"}, headers=mallory).status_code == 403
    assert client.get(f"{JOBS}/{jid}", headers=alice).json()["status"] != "Cancelled"


def test_an_admin_sees_and_acts_on_every_tenant(client: TestClient, admin: dict[str, str]) -> None:
    alice = auth(client, "alice", "vision")
    bob = auth(client, "bob", "nlp")
    a = submit(client, alice, duration_s=1e6)
    submit(client, bob, duration_s=1e6)
    assert client.get(JOBS, headers=admin).json()["count"] == 2
    assert client.get(JOBS, params={"tenant": "nlp"}, headers=admin).json()["count"] == 1
    assert client.post(f"{JOBS}/{a['id']}/cancel", headers=admin).json()["status"] == "Cancelled"


def test_a_tenants_traces_and_replays_are_its_own(client: TestClient, trace_file: object) -> None:
    from pathlib import Path

    from tests.api.builders import upload_trace

    alice = auth(client, "alice", "vision")
    mallory = auth(client, "mallory", "nlp")
    trace = upload_trace(client, alice, Path(str(trace_file)))
    assert client.get(f"/api/v1/traces/{trace['id']}", headers=mallory).status_code == 404
    assert client.get("/api/v1/traces", headers=mallory).json()["count"] == 0
    body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4"}
    r = client.post("/api/v1/replays", json=body, headers=mallory)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trace_id"]
