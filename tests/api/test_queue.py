"""GET /order (waiting jobs in the policy's order) and GET /jobs/{id}/timeline, on
PostgreSQL and SQLite, in local mode under SRTF: positions, filters, 422s and 403s,
tenants redacted, and who preempted whom in a job's events and its timeline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests import waiting
from tests.api.builders import auth, submit

TIMEOUT_S = 60.0  # a slow, loaded CI machine; every wait ends as soon as it holds


@pytest.fixture(params=["postgresql", "sqlite"])
def srtf(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    base: Settings = request.getfixturevalue(
        "pg_settings" if request.param == "postgresql" else "sqlite_settings"
    )
    with TestClient(create_app(base.model_copy(update={"policy": "srtf"}))) as c:
        yield c


def _get(client: TestClient, path: str, headers: dict[str, str]) -> Any:
    r = client.get(f"/api/v1{path}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def _status(client: TestClient, job: dict[str, Any], headers: dict[str, str], want: str) -> None:
    waiting.wait_for(
        f"job {job['name']} {want}",
        lambda: _get(client, f"/jobs/{job['id']}", headers)["status"] == want,
        TIMEOUT_S,
    )


def test_queue_in_srtf_order_filtered_and_redacted(srtf: TestClient) -> None:
    root = auth(srtf, "root", "ops", "admin")
    alice = auth(srtf, "alice", "a", "user")
    bob = auth(srtf, "bob", "b", "user")
    # 2x4 GPUs: every job takes all 8, so one runs and SRTF orders the rest.
    long = submit(srtf, alice, name="long", num_gpus=8, duration_s=1e6)
    _status(srtf, long, alice, "Running")
    short = submit(srtf, bob, name="short", num_gpus=8, duration_s=2e5)
    _status(srtf, long, alice, "Preempted")
    mid = submit(srtf, alice, name="mid", num_gpus=8, duration_s=5e5)
    other = submit(srtf, bob, name="other", num_gpus=8, duration_s=3e5)

    def admin_order() -> list[tuple[str, int | None]] | None:
        body = _get(srtf, "/order", root)
        got = [(e["name"], e["position"]) for e in body["data"]]
        return got if got == [("other", 1), ("mid", 2), ("long", 3)] else None

    waiting.wait_for("the queue in SRTF order", admin_order, TIMEOUT_S)
    mine = _get(srtf, "/order", alice)
    assert [(e["id"], e["position"]) for e in mine["data"]] == [(mid["id"], 2), (long["id"], 3)]
    assert (mine["count"], mine["waiting"], mine["others_waiting"]) == (2, 3, 1)
    assert all(e["tenant"] == "a" for e in mine["data"])
    assert other["id"] not in str(mine) and short["id"] not in str(mine)
    entry = mine["data"][0]
    assert entry["wait_s"] is not None and entry["wait_s"] >= 0
    assert entry["reason_code"] == "ShorterJobsFirst"
    assert mine["now_s"] >= entry["submit_s"]
    # Filters: tenant (admins any, users their own), a waiting status.
    only_a = _get(srtf, "/order?tenant=a", root)
    assert [e["name"] for e in only_a["data"]] == ["mid", "long"]
    preempted = _get(srtf, "/order?status=Preempted", alice)
    assert [(e["name"], e["position"]) for e in preempted["data"]] == [("long", 3)]
    queued_b = _get(srtf, "/order?status=Queued&tenant=b", root)
    assert [e["name"] for e in queued_b["data"]] == ["other"]
    assert srtf.get("/api/v1/order?tenant=b", headers=alice).status_code == 403
    for bad in ("status=Running", "status=nope", "tenant=%20x", "limit=0", "skip=-1"):
        r = srtf.get(f"/api/v1/order?{bad}", headers=alice)
        assert r.status_code == 422, (bad, r.text)
        assert bad.split("=")[0] in r.text
    assert srtf.get("/api/v1/order").status_code == 401
    # The job's own record carries its position; a running job has none.
    assert _get(srtf, f"/jobs/{long['id']}", alice)["queue_position"] == 3
    assert _get(srtf, f"/jobs/{short['id']}", bob)["queue_position"] is None


def test_who_preempted_whom_in_events_and_timeline(srtf: TestClient) -> None:
    root = auth(srtf, "root", "ops", "admin")
    alice = auth(srtf, "alice", "a", "user")
    bob = auth(srtf, "bob", "b", "user")
    long = submit(srtf, alice, name="long", num_gpus=8, duration_s=1e6)
    _status(srtf, long, alice, "Running")
    quick = submit(srtf, alice, name="quick", num_gpus=8, duration_s=5e5)
    _status(srtf, long, alice, "Preempted")
    bobs = submit(srtf, bob, name="bobs", num_gpus=8, duration_s=1e5)
    _status(srtf, quick, alice, "Preempted")

    # Events: alice's own job is named with its name, bob's job is not named at all.
    def stops(job: dict[str, Any], headers: dict[str, str]) -> list[str]:
        events = _get(srtf, f"/jobs/{job['id']}/events", headers)["data"]
        return [e["detail"] for e in events if e["kind"] == "preempted"]

    by_alice = waiting.wait_for("long's preemption", lambda: stops(long, alice), TIMEOUT_S)
    assert by_alice == [
        f"ShorterJobsFirst: jobs with less remaining time hold the GPUs; "
        f"preempted by job {quick['id']} (quick)"
    ]
    by_bob = waiting.wait_for("quick's preemption", lambda: stops(quick, alice), TIMEOUT_S)
    assert by_bob[0].endswith("preempted by another tenant's job")
    assert bobs["id"] not in str(_get(srtf, f"/jobs/{quick['id']}/events", alice))
    seen_by_root = stops(quick, root)
    assert seen_by_root and seen_by_root[0].endswith(f"preempted by job {bobs['id']}")

    # Timeline: queued, running on all 8 GPUs, preempted by the job that took them.
    line = _get(srtf, f"/jobs/{quick['id']}/timeline", alice)
    states = [(i["state"], i["decision"]) for i in line["intervals"]]
    assert states == [("Queued", "submit"), ("Running", "start"), ("Preempted", "preempt")]
    queued, ran, stopped = line["intervals"]
    assert queued["to_s"] == ran["from_s"] and ran["to_s"] == stopped["from_s"]
    assert stopped["to_s"] is None and line["status"] == "Preempted"
    assert sorted((p["node"], tuple(p["gpus"])) for p in ran["allocation"]) == [
        ("node-0", (0, 1, 2, 3)),
        ("node-1", (0, 1, 2, 3)),
    ]
    assert stopped["allocation"] is None
    assert stopped["preempted_by"] == [{"id": None, "name": None}]
    assert "another tenant's job" in stopped["reason"] and bobs["id"] not in str(line)
    as_root = _get(srtf, f"/jobs/{quick['id']}/timeline", root)
    assert as_root["intervals"][2]["preempted_by"] == [{"id": bobs["id"], "name": "bobs"}]
    long_line = _get(srtf, f"/jobs/{long['id']}/timeline", alice)
    assert long_line["intervals"][2]["preempted_by"] == [{"id": quick["id"], "name": "quick"}]
    # Another tenant's job, or none at all, is a 404.
    assert srtf.get(f"/api/v1/jobs/{quick['id']}/timeline", headers=bob).status_code == 404
    assert srtf.get(f"/api/v1/jobs/{'0' * 32}/timeline", headers=root).status_code == 404
    assert srtf.get("/api/v1/jobs/x/timeline", headers=root).status_code == 404
