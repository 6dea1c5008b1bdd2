"""Bearer tokens, roles and the users/tokens routes."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.store.models import Token
from tests.api.builders import auth

API = "/api/v1"


def test_requests_without_a_valid_token_are_401(client: TestClient) -> None:
    assert client.get(f"{API}/jobs").status_code == 401
    bad = {"Authorization": "Bearer gf_not-a-token"}
    assert client.get(f"{API}/jobs", headers=bad).status_code == 401
    assert client.get(f"{API}/users/me", headers={"Authorization": "Basic eDp5"}).status_code == 401


def test_users_are_managed_by_admins_only(client: TestClient, admin: dict[str, str]) -> None:
    alice = auth(client, "alice", "vision")
    body = {"name": "carol", "tenant": "vision", "role": "user"}
    assert client.post(f"{API}/users", json=body, headers=alice).status_code == 403
    r = client.post(f"{API}/users", json=body, headers=admin)
    assert r.status_code == 201 and r.json()["tenant"] == "vision"
    assert client.post(f"{API}/users", json=body, headers=admin).status_code == 409
    assert client.get(f"{API}/users", headers=admin).json()["count"] == 3
    assert client.get(f"{API}/users", headers=alice).status_code == 403


def test_tokens_are_shown_once_stored_hashed_and_revocable(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    me = client.get(f"{API}/users/me", headers=alice).json()
    r = client.post(f"{API}/users/{me['id']}/tokens", json={"name": "laptop"}, headers=alice)
    assert r.status_code == 201
    created = r.json()
    secret = created["token"]
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        hashes = session.scalars(select(Token.token_hash)).all()
    assert secret not in hashes and all(len(h) == 64 for h in hashes)
    laptop = {"Authorization": f"Bearer {secret}"}
    listed = client.get(f"{API}/tokens", headers=laptop).json()
    assert listed["count"] == 2 and "token" not in listed["data"][0]
    assert client.delete(f"{API}/tokens/{created['id']}", headers=alice).status_code == 204
    assert client.get(f"{API}/users/me", headers=laptop).status_code == 401


def test_a_user_cannot_mint_tokens_for_others(client: TestClient, admin: dict[str, str]) -> None:
    alice = auth(client, "alice", "vision")
    root = client.get(f"{API}/users/me", headers=admin).json()
    r = client.post(f"{API}/users/{root['id']}/tokens", json={}, headers=alice)
    assert r.status_code == 404
    admin_tokens = client.get(f"{API}/tokens", headers=admin).json()["data"]
    assert client.delete(f"{API}/tokens/{admin_tokens[0]['id']}", headers=alice).status_code == 404
