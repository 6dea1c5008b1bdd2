"""The REST names of issue 29, item 5: the quota tree is /quotas and the wait order is
/order; /queues and /queue, their old names, answer the same for one release and are
marked deprecated in the OpenAPI document (docs/api.md, "Names")."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.api.builders import auth, submit, wait_for

API = "/api/v1"


def _paths(client: TestClient) -> dict[str, Any]:
    paths: dict[str, Any] = client.get("/openapi.json").json()["paths"]
    return paths


def test_old_names_are_deprecated_aliases_and_new_names_are_not(
    sqlite_client: TestClient,
) -> None:
    paths = _paths(sqlite_client)
    for old, new in (("/queue", "/order"), ("/queues", "/quotas")):
        for suffix in ("", "/{name}", "/series") if old == "/queues" else ("",):
            old_ops, new_ops = paths[API + old + suffix], paths[API + new + suffix]
            assert set(old_ops) == set(new_ops), (old, suffix)
            assert all(op.get("deprecated") is True for op in old_ops.values()), old
            assert not any(op.get("deprecated") for op in new_ops.values()), new
            ids = {op["operationId"] for op in [*old_ops.values(), *new_ops.values()]}
            assert len(ids) == 2 * len(new_ops)  # no operation id shared


def test_an_alias_answers_as_its_new_name(sqlite_client: TestClient) -> None:
    api = sqlite_client
    root = auth(api, "root", "ops", "admin")
    ann = auth(api, "ann", "team-a")
    r = api.put(f"{API}/quotas/team-a", json={"guarantee": 4}, headers=root)
    assert r.status_code == 201, r.text
    # Written through the old name, read through the new one, and the reverse.
    r = api.put(f"{API}/queues/team-b", json={"guarantee": 2}, headers=root)
    assert r.status_code == 201, r.text
    new = api.get(f"{API}/quotas", headers=ann).json()
    old = api.get(f"{API}/queues", headers=ann).json()
    assert old == new
    assert {q["name"]: q["guarantee"] for q in new["data"]} == {"team-a": 4, "team-b": 2}
    assert api.delete(f"{API}/queues/team-b", headers=root).status_code == 204
    assert api.get(f"{API}/quotas/team-b", headers=ann).status_code == 404
    for _ in range(3):  # 8 GPUs: the third 4-GPU job waits
        submit(api, ann, num_gpus=4, duration_s=1e6)
    wait_for(lambda: api.get(f"{API}/order", headers=ann).json()["waiting"] == 1)
    order = api.get(f"{API}/order", headers=ann).json()
    queue = api.get(f"{API}/queue", headers=ann).json()
    assert [e["id"] for e in order["data"]] == [e["id"] for e in queue["data"]]
    assert len(order["data"]) == 1
