"""Authentication and the body-size limit come before any body is read (api.http.guard).

Tested at the ASGI level: the app is called with a `receive` that counts its calls
and never runs out (an endless upload), so a test sees whether the body was read.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient

from api.http.errors import INPUT_SHOWN_CHARS
from tests.api.builders import auth, job_spec

CHUNK = b"x" * 2**16
GIVE_UP_CALLS = 2**11  # 128 MiB of CHUNKs


def _call(
    client: TestClient,
    path: str,
    headers: dict[str, str],
    *,
    method: str = "POST",
) -> tuple[int, int]:
    """One request with an endless body; returns (status or 0, calls of receive)."""
    calls = 0
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls > GIVE_UP_CALLS:  # an app that reads it all: fail, do not hang
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": CHUNK, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }

    async def run() -> None:
        await client.app(scope, receive, send)  # type: ignore[arg-type]

    anyio.run(run)
    return (statuses[0] if statuses else 0), calls


@pytest.mark.parametrize("length", [None, str(100 * 2**20)])
@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/traces", "/api/v1/replays/sweeps"])
def test_no_token_is_a_401_before_the_body_is_read(
    client: TestClient, path: str, length: str | None
) -> None:
    multipart = "multipart/form-data; boundary=x"
    headers = {"content-type": multipart if path.endswith("traces") else "application/json"}
    if length is not None:
        headers["content-length"] = length
    assert _call(client, path, headers) == (401, 0)
    assert _call(client, path, {**headers, "authorization": "Bearer gf_wrong"}) == (401, 0)


def test_a_declared_length_over_the_limit_is_a_413_before_reading(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    big = str(client.app.state.settings.max_body_bytes + 1)  # type: ignore[attr-defined]
    headers = {**alice, "content-type": "application/json", "content-length": big}
    assert _call(client, "/api/v1/jobs", headers) == (413, 0)
    upload = {**alice, "content-type": "multipart/form-data; boundary=x"}
    assert _call(client, "/api/v1/traces", {**upload, "content-length": str(2**30)}) == (413, 0)
    assert _call(client, "/api/v1/jobs", {**alice, "content-length": "12x"}) == (400, 0)


def test_a_body_without_length_is_cut_off_at_the_limit(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    limit: int = client.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    status, calls = _call(client, "/api/v1/jobs", {**alice, "content-type": "application/json"})
    assert status == 413
    assert calls == limit // len(CHUNK) + 1  # the chunk that passed the limit, no more


def test_a_job_report_needs_its_job_token_before_its_body(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    r = client.post("/api/v1/jobs", json=job_spec(), headers=alice)
    job, token = r.json()["id"], r.json()["metrics_token"]
    path = f"/api/v1/jobs/{job}/metrics"
    big = {"content-type": "application/json", "content-length": str(100 * 2**20)}
    assert _call(client, path, big) == (404, 0)
    assert _call(client, path, {**big, "x-job-token": "gf_wrong"}) == (404, 0)
    assert _call(client, path, {**big, "x-job-token": token, **alice}) == (413, 0)
    assert _call(client, "/api/v1/jobs/abc/metrics", {**big, "x-job-token": token}) == (404, 0)


def test_small_bodies_and_public_routes_still_work(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    assert client.post("/api/v1/jobs", json=job_spec(), headers=alice).status_code == 201
    assert client.get("/healthz").status_code == 200
    r = client.post("/api/v1/jobs", json=job_spec())
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_a_422_does_not_echo_a_large_input(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    r = client.post("/api/v1/jobs", json=job_spec(name="n" * 2**20), headers=alice)
    assert r.status_code == 422
    assert len(r.content) < 2000
    assert r.json()["detail"][0]["input"].startswith("n" * INPUT_SHOWN_CHARS)
    r = client.post("/api/v1/jobs", json=[1] * 100_000, headers=alice)
    assert r.status_code == 422 and len(r.content) < 2000
