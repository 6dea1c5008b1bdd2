"""Local mode's runtime state across a restart of the app (api.local_mode.state), on
SQLite and PostgreSQL: the switched policy and the rule for an explicit `--policy`,
cordons, drains and uncordons, and the clock. The kill -9 of a real server is in
tests/gpuflow/test_serve_restart.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.local_mode.state import chosen_policy
from api.settings import Settings
from tests.api.builders import auth

API = "/api/v1"


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest) -> Settings:
    fixture = "pg_settings" if request.param == "postgresql" else "sqlite_settings"
    got: Settings = request.getfixturevalue(fixture)
    assert "policy" not in got.model_fields_set  # as `gpuflow serve` without --policy
    return got


def _active(client: TestClient, headers: dict[str, str]) -> str:
    name: str = client.get(f"{API}/policies/active", headers=headers).json()["name"]
    return name


def _states(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    return {
        n["name"]: n["state"] for n in client.get(f"{API}/nodes", headers=headers).json()["data"]
    }


def test_the_rule_between_an_explicit_policy_and_the_stored_one() -> None:
    assert chosen_policy("fifo", explicit=False, saved="srtf") == "srtf"  # the last switch
    assert chosen_policy("tiresias", explicit=True, saved="srtf") == "tiresias"
    assert chosen_policy("fifo", explicit=False, saved=None) == "fifo"


def test_a_switched_policy_survives_a_restart_until_policy_is_given(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        root = auth(client, "root", "ops", "admin")
        assert _active(client, root) == "fifo"
        r = client.put(f"{API}/policies/active", json={"name": "srtf"}, headers=root)
        assert r.status_code == 200, r.text
    with TestClient(create_app(settings)) as client:
        assert _active(client, root) == "srtf"  # restored
    explicit = settings.model_copy(update={"policy": "tiresias"})  # set: as --policy is
    with TestClient(create_app(explicit)) as client:
        assert _active(client, root) == "tiresias"  # --policy wins ...
    with TestClient(create_app(settings)) as client:
        assert _active(client, root) == "tiresias"  # ... and is stored in its place


def test_cordons_and_drains_survive_a_restart_and_an_uncordon_too(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        root = auth(client, "root", "ops", "admin")
        nodes = sorted(_states(client, root))
        assert client.post(f"{API}/nodes/{nodes[0]}/cordon", headers=root).status_code == 200
        assert client.post(f"{API}/nodes/{nodes[1]}/drain", headers=root).status_code == 200
        assert client.post(f"{API}/nodes/no-such/cordon", headers=root).status_code == 404
        before_s = client.get(f"{API}/cluster", headers=root).json()["now_s"]
    with TestClient(create_app(settings)) as client:
        assert _states(client, root) == {nodes[0]: "cordoned", nodes[1]: "cordoned"}
        assert client.get(f"{API}/cluster", headers=root).json()["now_s"] >= before_s
        assert client.post(f"{API}/nodes/{nodes[0]}/uncordon", headers=root).status_code == 200
    with TestClient(create_app(settings)) as client:
        assert _states(client, root) == {nodes[0]: "ready", nodes[1]: "cordoned"}
