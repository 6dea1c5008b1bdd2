"""The cluster-wide event stream (GET /api/v1/events): newest first, filtered by kind,
job, tenant and node, other tenants' jobs hidden from a user, a preemption naming its
preemptor. Local mode on PostgreSQL; the starts and the preemption are written as the
scheduler writes them (api.store.models.JobEvent)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from api.store.models import JobEvent
from tests.api.builders import auth, submit, wait_for

EVENTS = "/api/v1/events"


def _events(client: TestClient, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    r = client.get(EVENTS, params=params, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == len(body["data"])
    data: list[dict[str, Any]] = body["data"]
    return data


def _status(client: TestClient, headers: dict[str, str], job_id: str) -> str:
    r = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status


def test_the_stream_filters_and_names_the_preemptor_to_those_who_may_see_it(
    client: TestClient,
) -> None:
    root = auth(client, "root", "ops", "admin")
    alice = auth(client, "alice", "vision")
    bob = auth(client, "bob", "speech")
    # Longer than the test: the scheduler starts `mine` on both nodes (2x4) and keeps it.
    mine = submit(client, alice, name="mine", num_gpus=8, duration_s=1e8)
    theirs = submit(client, bob, name="theirs", num_gpus=8, duration_s=1e8)
    wait_for(lambda: _status(client, alice, mine["id"]) == "Running", timeout_s=30)
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with sessions() as session:
        on = [{"node": "node-1", "gpus": [0, 1]}]
        session.add_all([
            JobEvent(job_id=mine["id"], kind="started", sim_s=10.0, detail="", allocation=on),
            JobEvent(job_id=mine["id"], kind="preempted", sim_s=20.0, by_jobs=[theirs["id"]],
                     detail=f"PreemptedByPolicy: job {theirs['id']} is shorter"),
            JobEvent(job_id=theirs["id"], kind="started", sim_s=20.0, detail="",
                     allocation=[{"node": "node-10", "gpus": [0]}]),
        ])  # fmt: skip
        session.commit()

    everything = _events(client, root)
    kinds = [(e["kind"], e["job"]["name"]) for e in everything]
    assert kinds[:3] == [("started", "theirs"), ("preempted", "mine"), ("started", "mine")]
    assert {("submitted", "mine"), ("submitted", "theirs")} <= set(kinds)
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    preempted = everything[1]
    assert preempted["by"] == [{"id": theirs["id"], "name": "theirs"}]
    assert preempted["tenant"] == "vision" and preempted["time_s"] == 20.0

    # Alice sees her jobs' events only; the preemptor is another tenant's, unnamed.
    hers = _events(client, alice)
    assert {e["job"]["id"] for e in hers} == {mine["id"]}
    (stop,) = [e for e in hers if e["kind"] == "preempted"]
    assert stop["by"] == [{"id": None, "name": None}]
    assert theirs["id"] not in stop["detail"] and "another tenant's job" in stop["detail"]

    # Filters: kind, job, tenant, node (node-1 is not node-10), paging back.
    assert [e["kind"] for e in _events(client, root, kind="preempted")] == ["preempted"]
    assert {e["job"]["id"] for e in _events(client, root, job=theirs["id"])} == {theirs["id"]}
    assert {e["tenant"] for e in _events(client, root, tenant="speech")} == {"speech"}
    on_1 = _events(client, root, node="node-1")  # the scheduler's start of `mine` too
    assert {"node": "node-1", "gpus": [0, 1]} in on_1[0]["nodes"]
    assert all(any(p["node"] == "node-1" for p in e["nodes"]) for e in on_1)
    assert theirs["id"] not in {e["job"]["id"] for e in on_1}  # it started on node-10
    older = _events(client, root, before_id=preempted["id"], limit=1)
    assert [e["id"] for e in older] == [everything[2]["id"]]


def test_bad_filters_are_422s_naming_the_field_and_another_tenant_a_403(
    client: TestClient,
) -> None:
    alice = auth(client, "alice", "vision")
    for params, field in [
        ({"kind": "Pre%"}, "kind"),
        ({"job": "x"}, "job"),
        ({"node": "%"}, "node"),
        ({"limit": 0}, "limit"),
        ({"before_id": 0}, "before_id"),
    ]:
        r = client.get(EVENTS, params=params, headers=alice)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", field]
    r = client.get(EVENTS, params={"tenant": "speech"}, headers=alice)
    assert r.status_code == 403
    assert client.get(EVENTS).status_code == 401
