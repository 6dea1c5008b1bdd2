"""Quotas enforced in local mode (api/local_mode/backend.py hands the table `queues` to the
LiveCluster, controller.quotas decides): a tenant that flooded the idle cluster gives
back what another queue's guarantee is owed, on PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.builders import auth, submit, wait_for

QUEUES = "/api/v1/quotas"
LONG_S = 1e6  # simulated seconds: nothing finishes during the test


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request: pytest.FixtureRequest) -> TestClient:
    client: TestClient = request.getfixturevalue(
        "client" if request.param == "postgresql" else "sqlite_client"
    )
    return client


def jobs_of(api: TestClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    r = api.get("/api/v1/jobs", headers=headers)
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def running_gpus(jobs: list[dict[str, Any]]) -> int:
    return sum(j["num_gpus"] for j in jobs if j["status"] == "Running")


def test_a_flooding_tenant_gives_back_the_guarantee_of_another(api: TestClient) -> None:
    admin = auth(api, "root", "ops", "admin")
    ann = auth(api, "ann", "team-a")
    bob = auth(api, "bob", "team-b")
    for name in ("team-a", "team-b"):  # 2x4 GPUs: half each
        r = api.put(f"{QUEUES}/{name}", json={"guarantee": 4}, headers=admin)
        assert r.status_code == 201, r.text
    for _ in range(4):
        submit(api, ann, num_gpus=2, duration_s=LONG_S)
    # team-b has no demand: team-a borrows its idle guarantee, the whole cluster.
    wait_for(lambda: running_gpus(jobs_of(api, ann)) == 8)
    for _ in range(2):
        submit(api, bob, num_gpus=2, duration_s=LONG_S)
    # The borrowed GPUs are reclaimed: each team at its guarantee.
    wait_for(lambda: running_gpus(jobs_of(api, bob)) == 4)
    a_jobs = jobs_of(api, ann)
    assert running_gpus(a_jobs) == 4
    held = [j for j in a_jobs if j["status"] != "Running"]
    assert len(held) == 2
    # They were preempted for the reclaim, and each says quota is what holds it: the
    # reclaim, or its queue's share (local mode writes a row when its state moves).
    assert {j["status"] for j in held} == {"Preempted"}
    assert {j["reason_code"] for j in held} <= {"Reclaimed", "QueueOverShare"}, held
    queues = {q["name"]: q for q in api.get(QUEUES, headers=ann).json()["data"]}
    assert queues["team-a"]["reclaims"] == 2 and queues["team-b"]["reclaims"] == 0
    assert queues["team-a"]["borrowed_gpus"] == 0
