"""The API keeps its own contract: timestamps with their zone on every database, 401
and 403 in the OpenAPI document, strict numbers, filters that refuse what they cannot
honour, errors that name the field."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.builders import auth, submit, upload_trace

API = "/api/v1"
JOBS = f"{API}/jobs"


def utc(text: str) -> datetime:
    stamp = datetime.fromisoformat(text)
    assert stamp.utcoffset() == timedelta(0), text
    return stamp


@pytest.mark.parametrize("db", ["postgresql", "sqlite"])
def test_timestamps_come_back_in_utc_with_their_zone(
    db: str, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue(
        "client" if db == "postgresql" else "sqlite_client"
    )
    alice = auth(client, "alice", "vision")
    job = submit(client, alice)
    stored = client.get(f"{JOBS}/{job['id']}", headers=alice).json()
    assert utc(stored["created_at"]) == utc(job["created_at"])
    utc(stored["updated_at"])
    for e in client.get(f"{JOBS}/{job['id']}/events", headers=alice).json()["data"]:
        utc(e["at"])
    utc(client.get(f"{API}/users/me", headers=alice).json()["created_at"])


def test_the_openapi_document_declares_401_and_403(client: TestClient) -> None:
    doc: dict[str, Any] = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path, operations in paths.items():
        for method, op in operations.items():
            if not path.startswith(API + "/"):
                continue
            if (method, path) == ("post", f"{JOBS}/{{job_id}}/metrics"):
                assert "401" not in op["responses"]  # the job's own token: a 404 if wrong
                continue
            assert "401" in op["responses"], (method, path)
            schema = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Message"}
    assert "Message" in doc["components"]["schemas"]
    for method, path in [("post", "/users"), ("get", "/users"), ("put", "/policies/active")]:
        assert "403" in paths[API + path][method]["responses"], path  # admins only
    assert "403" in paths[JOBS]["get"]["responses"]  # another tenant's filter
    assert "403" not in paths[f"{JOBS}/{{job_id}}"]["get"]["responses"]


def test_a_user_naming_another_tenant_is_a_403_and_an_admin_is_not(
    client: TestClient, admin: dict[str, str]
) -> None:
    alice = auth(client, "alice", "vision")
    submit(client, alice)
    refused = client.get(JOBS, params={"tenant": "nlp"}, headers=alice)
    assert refused.status_code == 403, refused.text
    own = client.get(JOBS, params={"tenant": "vision"}, headers=alice)
    assert own.status_code == 200 and own.json()["count"] == 1
    assert client.get(JOBS, params={"tenant": "nlp"}, headers=admin).json()["count"] == 0
    assert client.get(JOBS, params={"tenant": "vision"}, headers=admin).json()["count"] == 1


def test_the_status_filter_takes_job_statuses_only(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    submit(client, alice, duration_s=1e6)
    r = client.get(JOBS, params={"status": "Bogus"}, headers=alice)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "status"]
    assert "Cancelled" in r.json()["detail"][0]["msg"]  # the statuses it takes
    listed = client.get(JOBS, params={"status": "Succeeded"}, headers=alice)
    assert listed.status_code == 200 and listed.json()["count"] == 0


@pytest.mark.parametrize(
    ("field", "value"), [("num_gpus", True), ("priority", False), ("num_gpus", 1.5)]
)
def test_a_job_number_of_another_type_is_a_422(
    client: TestClient, field: str, value: object
) -> None:
    alice = auth(client, "alice", "vision")
    body = {"name": "t", "num_gpus": 1, "duration_s": 10.0, field: value}
    r = client.post(JOBS, json=body, headers=alice)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field]


@pytest.mark.parametrize("seed", [False, True, "1", 1.5])
def test_a_seed_that_is_not_an_integer_is_a_422(
    sqlite_client: TestClient, trace_file: Path, seed: object
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    trace = upload_trace(sqlite_client, alice, trace_file)
    body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4", "seed": seed}
    r = sqlite_client.post(f"{API}/replays", json=body, headers=alice)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "seed"]


def test_a_whole_float_is_the_integer_json_schema_says_it_is(
    sqlite_client: TestClient, trace_file: Path
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    trace = upload_trace(sqlite_client, alice, trace_file)
    body = {"trace_id": float(trace["id"]), "policy": "fifo", "cluster": "2x4", "seed": 7.0}
    r = sqlite_client.post(f"{API}/replays", json=body, headers=alice)
    assert r.status_code == 202, r.text
    assert (r.json()["trace_id"], r.json()["seed"]) == (trace["id"], 7)
    job = {"name": "j", "num_gpus": 2.0, "duration_s": 10, "priority": -3.0}
    r = sqlite_client.post(JOBS, json=job, headers=alice)
    assert r.status_code == 201, r.text
    assert (r.json()["num_gpus"], r.json()["priority"]) == (2, -3)


def test_an_unknown_query_parameter_is_a_422_naming_it(sqlite_client: TestClient) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    r = sqlite_client.get(f"{JOBS}?limt=5&limit=2", headers=alice)
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["query", "limt"]]
    assert sqlite_client.get(f"{JOBS}?limit=2&status=Queued", headers=alice).status_code == 200
    # A parameter a dependency takes counts as the route's (the queue's tenant filter).
    assert sqlite_client.get(f"{API}/order?limit=5", headers=alice).status_code == 200


@pytest.mark.parametrize(
    ("override", "loc"),
    [
        ({"policies": ["fifo", "nope"]}, ["body", "policies", 1]),
        ({"clusters": ["2x4", "nope"]}, ["body", "clusters", 1]),
        ({"trace_ids": [1, True]}, ["body", "trace_ids", 1]),
    ],
)
def test_sweep_errors_name_the_list_item(
    sqlite_client: TestClient, trace_file: Path, override: dict[str, Any], loc: list[Any]
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    trace = upload_trace(sqlite_client, alice, trace_file)
    body = {"trace_ids": [trace["id"]], "policies": ["fifo"], "clusters": ["2x4"], **override}
    r = sqlite_client.post(f"{API}/replays/sweeps", json=body, headers=alice)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, r.text
