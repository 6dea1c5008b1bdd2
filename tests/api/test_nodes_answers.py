"""GET /nodes answered again per viewer while the nodes stay as they were
(api/nodes_answers.py): each viewer gets its own redaction, and a job placed or a node
cordoned shows in the next answer."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from api.nodes_answers import NodesAnswers
from api.settings import Settings
from tests.api.builders import auth, submit, wait_for

API = "/api/v1"


def _nodes(client: TestClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    r = client.get(f"{API}/nodes", headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    nodes: list[dict[str, Any]] = r.json()["data"]
    return nodes


def _seen(client: TestClient, headers: dict[str, str]) -> tuple[set[str], int]:
    """The jobs named on the nodes (shares included) and the others counted."""
    nodes = _nodes(client, headers)
    named = {j for n in nodes for j in n["jobs"]}
    shares = {s["job"] for n in nodes for g in n["gpu_list"] for s in g["shares"]}
    assert shares - {None} == named
    return named, sum(n["other_jobs"] for n in nodes)


def test_each_viewer_gets_its_own_answer_and_a_change_a_new_one(pg_settings: Settings) -> None:
    with TestClient(create_app(pg_settings)) as client:
        alice = auth(client, "alice", "vision")
        bob = auth(client, "bob", "speech")
        root = auth(client, "root", "ops", "admin")
        mine = submit(client, alice, num_gpus=2, duration_s=1e6)["id"]
        wait_for(lambda: _seen(client, root) == ({mine}, 0))
        for _ in range(2):  # the same nodes asked for by three viewers, in turn
            assert _seen(client, alice) == ({mine}, 0)
            assert _seen(client, bob) == (set(), 1)
            assert _seen(client, root) == ({mine}, 0)
        theirs = submit(client, bob, num_gpus=2, duration_s=1e6)["id"]
        wait_for(lambda: _seen(client, root) == ({mine, theirs}, 0))
        assert _seen(client, alice) == ({mine}, 1)
        assert _seen(client, bob) == ({theirs}, 1)
        name = _nodes(client, root)[0]["name"]
        r = client.post(f"{API}/nodes/{name}/cordon", headers=root)
        assert r.status_code == 200, r.text
        for viewer in (alice, root):  # at once: no round needed
            assert {n["name"]: n["state"] for n in _nodes(client, viewer)}[name] == "cordoned"


def test_an_answer_is_kept_for_the_latest_version_only() -> None:
    answers = NodesAnswers()
    admin, tenant = (True, None), (False, "vision")
    answers.put(None, admin, b"unversioned")
    assert answers.get(None, admin) is None
    answers.put(3, admin, b"three")
    answers.put(3, tenant, b"three for vision")
    assert answers.get(3, admin) == b"three" and answers.get(3, tenant) == b"three for vision"
    answers.put(2, admin, b"two, built before three and slower")
    assert answers.get(2, admin) is None and answers.get(3, admin) == b"three"
    answers.put(4, tenant, b"four for vision")
    assert answers.get(3, admin) is None  # a new version drops the others' answers
    assert answers.get(4, admin) is None and answers.get(4, tenant) == b"four for vision"
