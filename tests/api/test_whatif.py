"""POST /api/v1/whatif in local mode: forecasts, tenant redaction, errors, auth."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.whatif import Limits
from policies.registry import policy_names
from tests.api.builders import auth, submit, wait_for

WHATIF = "/api/v1/whatif"
JOBS = "/api/v1/jobs"


def _running(client: TestClient, headers: dict[str, str], job_id: str) -> bool:
    return bool(client.get(f"{JOBS}/{job_id}", headers=headers).json()["status"] == "Running")


def _two_tenants(client: TestClient) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """On 2x4 GPUs: alice's 8-GPU job runs; bob's long and short 8-GPU jobs wait."""
    alice = auth(client, "alice", "vision")
    bob = auth(client, "bob", "nlp")
    first = submit(client, alice, name="first", num_gpus=8, duration_s=1e6)
    wait_for(lambda: _running(client, alice, first["id"]))
    long = submit(client, bob, name="long", num_gpus=8, duration_s=1e6)
    short = submit(client, bob, name="short", num_gpus=8, duration_s=1e3)
    return alice, bob, [first["id"], long["id"], short["id"]]


@pytest.mark.parametrize("which", ["client", "sqlite_client"])
def test_forecasts_per_policy_with_the_callers_jobs_only(
    which: str, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue(which)
    _, bob, (first, long, short) = _two_tenants(client)
    r = client.post(WHATIF, json={"policies": ["fifo", "srtf"]}, headers=bob)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["active_policy"] == "fifo" and body["cluster"] == "2x4"
    assert set(body["policies"]) == {"fifo", "srtf"}
    for figures in body["policies"].values():
        assert figures["wall_s"] > 0 and figures["stopped"] in (None, "horizon")
        assert figures["avg_jct_s"] is not None
    assert body["other_tenants_jobs"] == 1
    jobs = {j["id"]: j for j in body["jobs"]}
    assert set(jobs) == {long, short}  # alice's job is counted, not named
    assert jobs[short]["name"] == "short" and jobs[short]["tenant"] == "nlp"
    assert jobs[short]["status"] == "Queued"
    fifo_short = jobs[short]["predicted_finish_s"]["fifo"]
    srtf_short = jobs[short]["predicted_finish_s"]["srtf"]
    assert srtf_short is not None and srtf_short < 2e3  # SRTF runs it first
    assert fifo_short is None or fifo_short > 1e6  # FIFO: after two 1e6-s jobs
    assert body["approximations"] and all(isinstance(a, str) for a in body["approximations"])
    assert first not in r.text and "first" not in [j["name"] for j in body["jobs"]]


def test_an_admin_sees_every_job_and_every_policy_by_default(
    client: TestClient, admin: dict[str, str]
) -> None:
    _, _, ids = _two_tenants(client)
    body = client.post(WHATIF, headers=admin).json()
    assert set(body["policies"]) == set(policy_names())
    assert {j["id"] for j in body["jobs"]} == set(ids) and body["other_tenants_jobs"] == 0
    first = next(j for j in body["jobs"] if j["id"] == ids[0])
    assert first["status"] == "Running"
    # FIFO keeps the running job (1e6 s, under way): it ends within its remaining time.
    assert 0.99e6 < first["predicted_finish_s"]["fifo"] <= 1e6


def test_bad_requests_are_refused_by_field(client: TestClient, admin: dict[str, str]) -> None:
    r = client.post(WHATIF, json={"policies": ["fifo", "nope"]}, headers=admin)
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "policies", 1] and "nope" in err["msg"]
    r = client.post(WHATIF, json={"policies": []}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "policies"]
    r = client.post(WHATIF, json={"policy": ["fifo"]}, headers=admin)
    assert r.status_code == 422


def test_too_many_jobs_is_a_413(client: TestClient, admin: dict[str, str]) -> None:
    client.app.state.whatif_limits = Limits(max_jobs=1)  # type: ignore[attr-defined]
    submit(client, admin, num_gpus=8, duration_s=1e6)
    submit(client, admin, num_gpus=8, duration_s=1e6)
    r = client.post(WHATIF, json={"policies": ["fifo"]}, headers=admin)
    assert r.status_code == 413
    assert r.json()["detail"] == "2 active jobs; a what-if replays at most 1"


def test_auth_is_required(client: TestClient) -> None:
    assert client.post(WHATIF).status_code == 401
    bad = {"Authorization": "Bearer nope"}
    assert client.post(WHATIF, headers=bad).status_code == 401


def test_only_an_admin_switches_the_policy(client: TestClient, admin: dict[str, str]) -> None:
    user = auth(client, "carol", "vision")
    r = client.put("/api/v1/policies/active", json={"name": "srtf"}, headers=user)
    assert r.status_code == 403
    r = client.put("/api/v1/policies/active", json={"name": "srtf"}, headers=admin)
    assert r.status_code == 200 and r.json()["active"] is True
    assert (
        client.post(WHATIF, json={"policies": ["fifo"]}, headers=user).json()["active_policy"]
        == "srtf"
    )
