"""The quota tree over REST (api/routes/quotas.py) in local mode, on PostgreSQL
and SQLite: admins create, replace and delete queues, everyone reads them, a change
that breaks the tree is a 422 naming the field, and each queue's figures follow its
tenants' jobs."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.builders import auth, submit, wait_for

QUEUES = "/api/v1/quotas"
TREE = {
    "research": {"guarantee": 8},
    "team-a": {"parent": "research", "guarantee": 4, "tenants": ["team-a", "vision"]},
    "team-b": {"parent": "research", "guarantee": 3, "limit": 6, "weight": 2},
    "team-c": {"parent": "research", "guarantee": 1},
}


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request: pytest.FixtureRequest) -> TestClient:
    client: TestClient = request.getfixturevalue(
        "client" if request.param == "postgresql" else "sqlite_client"
    )
    return client


def put_tree(api: TestClient, admin: dict[str, str]) -> None:
    for name, body in TREE.items():
        r = api.put(f"{QUEUES}/{name}", json=body, headers=admin)
        assert r.status_code == 201, r.text


def by_name(api: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    r = api.get(QUEUES, headers=headers)
    assert r.status_code == 200, r.text
    return {q["name"]: q for q in r.json()["data"]}


def test_admin_defines_everyone_reads(api: TestClient) -> None:
    admin = auth(api, "root", "ops", "admin")
    user = auth(api, "ann", "team-a")
    assert api.get(QUEUES, headers=user).json() == {"data": [], "count": 0, "fairness_jain": None}
    put_tree(api, admin)
    queues = by_name(api, user)
    assert list(queues) == ["research", "team-a", "team-b", "team-c"]
    b = queues["team-b"]
    assert (b["parent"], b["guarantee"], b["limit"], b["weight"], b["leaf"]) == (
        "research", 3, 6, 2.0, True,
    )  # fmt: skip
    assert queues["research"]["leaf"] is False and queues["research"]["guarantee_gpus"] == 8
    # Replace: 200, not 201; the new values read back.
    r = api.put(f"{QUEUES}/team-b", json={"parent": "research", "guarantee": 2}, headers=admin)
    assert r.status_code == 200 and r.json()["limit"] is None and r.json()["guarantee_gpus"] == 2
    assert api.get(f"{QUEUES}/team-b", headers=user).json()["guarantee"] == 2
    # Read only for a user.
    assert api.put(f"{QUEUES}/team-b", json={}, headers=user).status_code == 403
    assert api.delete(f"{QUEUES}/team-c", headers=user).status_code == 403
    assert api.delete(f"{QUEUES}/team-c", headers=admin).status_code == 204
    assert api.get(f"{QUEUES}/team-c", headers=user).status_code == 404
    assert api.delete(f"{QUEUES}/team-c", headers=admin).status_code == 404


@pytest.mark.parametrize(
    ("name", "body", "loc", "words"),
    [
        (
            "team-c",
            {"parent": "research", "guarantee": 5},
            ["research", "guarantee"],
            "add up to 12",
        ),
        ("team-a", {"parent": "research", "guarantee": 4, "limit": 2}, ["limit"], "below"),
        ("team-d", {"parent": "nowhere"}, ["parent"], "no quota named 'nowhere'"),
        ("team-d", {"parent": "research", "tenants": ["vision"]}, ["tenants"], "'vision'"),
        ("team-d", {"weight": 0}, ["weight"], "greater than 0"),
        ("team-d", {"guarantee": -1}, ["guarantee"], ""),
        ("team-d", {"guarantee": {"A100": -1}}, ["guarantee"], ""),
        ("team-d", {"cap": 3}, ["cap"], "Extra inputs"),
        ("Team_D", {}, ["name"], "pattern"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    api: TestClient, name: str, body: dict[str, Any], loc: list[str], words: str
) -> None:
    admin = auth(api, "root", "ops", "admin")
    put_tree(api, admin)
    r = api.put(f"{QUEUES}/{name}", json=body, headers=admin)
    assert r.status_code == 422, r.text
    (err, *_) = r.json()["detail"]
    assert err["loc"][-len(loc) :] == loc or err["loc"][1 : 1 + len(loc)] == loc, err
    assert words in err["msg"], err
    assert list(by_name(api, admin)) == list(TREE)  # nothing changed


def test_a_parent_with_children_is_not_deleted(api: TestClient) -> None:
    admin = auth(api, "root", "ops", "admin")
    put_tree(api, admin)
    r = api.delete(f"{QUEUES}/research", headers=admin)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["team-a.parent"]


def test_figures_follow_the_tenants_jobs(api: TestClient) -> None:
    admin = auth(api, "root", "ops", "admin")
    put_tree(api, admin)
    vision = auth(api, "vic", "vision")
    b = auth(api, "bob", "team-b")
    # 2x4 cluster: team-a's tenant vision takes 6 GPUs (2 over its guarantee of 4),
    # team-b's 4-GPU job waits for them.
    first = submit(api, vision, num_gpus=6, duration_s=10_000.0)
    wait_for(lambda: api.get(f"/api/v1/jobs/{first['id']}", headers=vision).json()["status"]
             == "Running")  # fmt: skip
    submit(api, b, num_gpus=4, duration_s=10_000.0)
    queues = wait_for(lambda: (q := by_name(api, b))["team-b"]["pending_jobs"] == 1 and q)
    a = queues["team-a"]
    assert (a["allocated_gpus"], a["borrowed_gpus"], a["share_of_guarantee"]) == (6, 2, 1.5)
    assert queues["research"]["allocated_gpus"] == 6 and queues["research"]["borrowed_gpus"] == 0
    assert sum(queues["team-b"]["pending_by_reason"].values()) == 1
    assert queues["team-c"]["allocated_gpus"] == 0 and queues["team-c"]["pending_jobs"] == 0
    # Leaves with demand: team-a at 1.5 of its guarantee, team-b at 0.
    assert api.get(QUEUES, headers=b).json()["fairness_jain"] == pytest.approx(0.5)
