"""Per-tenant limits on replays (issue 15): one tenant cannot queue everyone else out.

Settings max_active_replays_per_tenant (queued or running; more is a 429) and
max_sweep_replays (one sweep's fan-out; more is a 422 naming `clusters`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from api.store.models import Replay
from tests.api.builders import auth, upload_trace

REPLAYS = "/api/v1/replays"


@pytest.fixture()
def capped(pg_settings: Settings) -> Iterator[TestClient]:
    limits = {"max_active_replays_per_tenant": 2, "max_sweep_replays": 4, "live": False}
    with TestClient(create_app(pg_settings.model_copy(update=limits))) as client:
        yield client


def _queued(client: TestClient, tenant: str, trace_id: int, n: int) -> None:
    """`n` replays of `tenant` left queued, as a busy worker pool leaves them."""
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        for _ in range(n):
            session.add(
                Replay(
                    tenant=tenant,
                    user_id=1,
                    trace_id=trace_id,
                    policy="fifo",
                    cluster="2x4",
                    status="queued",
                    progress=0.0,
                    placement="consolidated",
                    interval_s=60.0,
                    seed=0,
                )
            )
        session.commit()


def test_a_tenant_at_its_cap_gets_429_and_others_do_not(
    capped: TestClient, trace_file: Path
) -> None:
    alice, bob = auth(capped, "alice", "vision"), auth(capped, "bob", "nlp")
    a_trace = upload_trace(capped, alice, trace_file)["id"]
    b_trace = upload_trace(capped, bob, trace_file)["id"]
    _queued(capped, "vision", a_trace, 2)
    body = {"trace_id": a_trace, "policy": "fifo", "cluster": "2x4"}
    r = capped.post(REPLAYS, json=body, headers=alice)
    assert r.status_code == 429 and "max_active_replays_per_tenant" in r.json()["detail"]
    assert r.headers["retry-after"]
    sweep = {"trace_ids": [a_trace], "policies": ["fifo"], "clusters": ["2x4"]}
    assert capped.post(f"{REPLAYS}/sweeps", json=sweep, headers=alice).status_code == 429
    r = capped.post(REPLAYS, json={**body, "trace_id": b_trace}, headers=bob)
    assert r.status_code == 202, r.text


def test_a_sweep_larger_than_the_limit_is_a_422_naming_clusters(
    capped: TestClient, trace_file: Path
) -> None:
    alice = auth(capped, "alice", "vision")
    trace = upload_trace(capped, alice, trace_file)["id"]
    body = {"trace_ids": [trace], "policies": ["fifo", "srtf"], "clusters": ["2x4", "1x8", "4x2"]}
    r = capped.post(f"{REPLAYS}/sweeps", json=body, headers=alice)
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "clusters"] and "at most 4" in detail["msg"]
