"""POST /replays and /replays/sweeps with an Idempotency-Key: a retry answers as the
first request and queues nothing new (api.store.idempotency), on PostgreSQL and SQLite.

The replays are queued on a real Redis broker with no worker on their queue, so what
was queued stays there to be counted (the queue's Redis list).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from api.settings import Settings
from api.store.models import IdempotencyKey, Replay
from tests.api.builders import auth, job_spec, upload_trace
from tests.api.conftest import DEAD_REDIS_URL, REDIS_URL

REPLAYS = "/api/v1/replays"
SWEEPS = f"{REPLAYS}/sweeps"
Headers = dict[str, str]


class Broker:
    """A queue of its own on the test Redis, with no worker: what is queued stays."""

    def __init__(self) -> None:
        run = uuid.uuid4().hex[:10]
        self.prefix, self.queue = f"gpuflow-idem-{run}:", f"gpuflow-idem-{run}"
        self.redis = redis.Redis.from_url(REDIS_URL)

    def settings(self, base: Settings) -> Settings:
        update = {
            "broker_url": REDIS_URL,
            "broker_key_prefix": self.prefix,
            "celery_queue": self.queue,
        }
        return base.model_copy(update=update)

    def queued(self) -> int:
        return int(self.redis.llen(self.prefix + self.queue))

    def close(self) -> None:
        for key in self.redis.scan_iter(match=self.prefix + "*"):
            self.redis.delete(key)
        self.redis.close()


@pytest.fixture()
def broker() -> Iterator[Broker]:
    b = Broker()
    yield b
    b.close()


@pytest.fixture(params=["postgresql", "sqlite"])
def base_settings(request: pytest.FixtureRequest) -> Settings:
    name = "pg_settings" if request.param == "postgresql" else "sqlite_settings"
    settings: Settings = request.getfixturevalue(name)
    return settings


@pytest.fixture()
def client(base_settings: Settings, broker: Broker) -> Iterator[TestClient]:
    with TestClient(create_app(broker.settings(base_settings))) as c:
        yield c


def stored(client: TestClient, model: Any) -> int:
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        return session.scalar(select(func.count()).select_from(model)) or 0


def user_and_trace(client: TestClient, trace_file: Path) -> tuple[Headers, int]:
    alice = auth(client, "alice", "vision")
    return alice, int(upload_trace(client, alice, trace_file)["id"])


def test_a_replay_retried_after_its_202_gets_the_same_replay_and_queues_nothing(
    client: TestClient, broker: Broker, trace_file: Path
) -> None:
    alice, trace = user_and_trace(client, trace_file)
    body = {"trace_id": trace, "policy": "srtf", "cluster": "2x4"}
    keyed = {**alice, "Idempotency-Key": "replay-7f3a"}
    first = client.post(REPLAYS, json=body, headers=keyed)
    assert first.status_code == 202, first.text
    assert broker.queued() == 1
    again = client.post(REPLAYS, json=body, headers=keyed)
    assert again.status_code == 202, again.text
    assert again.json() == first.json()  # the same id, status, timestamps
    assert stored(client, Replay) == 1 and broker.queued() == 1
    other = client.post(REPLAYS, json=body, headers={**alice, "Idempotency-Key": "another"})
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    assert stored(client, Replay) == 2 and broker.queued() == 2


def test_a_sweep_retried_after_its_202_gets_the_same_sweep_and_queues_nothing(
    client: TestClient, broker: Broker, trace_file: Path
) -> None:
    alice, trace = user_and_trace(client, trace_file)
    body = {"trace_ids": [trace], "policies": ["fifo", "srtf"], "clusters": ["2x4"]}
    keyed = {**alice, "Idempotency-Key": "sweep-1"}
    first = client.post(SWEEPS, json=body, headers=keyed)
    assert first.status_code == 202, first.text
    assert len(first.json()["replays"]) == 2 and broker.queued() == 2
    again = client.post(SWEEPS, json=body, headers=keyed)
    assert again.status_code == 202 and again.json() == first.json()
    assert stored(client, Replay) == 2 and broker.queued() == 2


def test_keys_are_per_user(client: TestClient, broker: Broker, trace_file: Path) -> None:
    alice, trace = user_and_trace(client, trace_file)
    bob = auth(client, "bob", "vision")
    body = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
    a = client.post(REPLAYS, json=body, headers={**alice, "Idempotency-Key": "k1"})
    b = client.post(REPLAYS, json=body, headers={**bob, "Idempotency-Key": "k1"})
    assert a.status_code == b.status_code == 202, b.text
    assert a.json()["id"] != b.json()["id"] and broker.queued() == 2


def test_a_key_reused_with_another_body_or_route_is_a_422_naming_the_header(
    client: TestClient, broker: Broker, trace_file: Path
) -> None:
    alice, trace = user_and_trace(client, trace_file)
    body = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
    job = client.post("/api/v1/jobs", json=job_spec(), headers={**alice, "Idempotency-Key": "j"})
    assert job.status_code == 201, job.text
    r = client.post(REPLAYS, json=body, headers={**alice, "Idempotency-Key": "j"})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["header", "Idempotency-Key"]
    assert "POST /api/v1/jobs" in error["msg"]
    keyed = {**alice, "Idempotency-Key": "r"}
    assert client.post(REPLAYS, json=body, headers=keyed).status_code == 202
    other = client.post(REPLAYS, json={**body, "policy": "srtf"}, headers=keyed)
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert "another body" in other.json()["detail"][0]["msg"]
    sweep = {"trace_ids": [trace], "policies": ["fifo"], "clusters": ["2x4"]}
    crossed = client.post(SWEEPS, json=sweep, headers=keyed)
    assert crossed.status_code == 422 and "POST /api/v1/replays" in crossed.text
    # And the job's key on a job is still the job's first answer, not a replay's.
    jobs_again = client.post(
        "/api/v1/jobs", json=job_spec(), headers={**alice, "Idempotency-Key": "j"}
    )
    assert jobs_again.status_code == 201 and jobs_again.json() == job.json()
    assert stored(client, Replay) == 1 and broker.queued() == 1


def test_a_replay_key_reused_on_a_job_is_a_422_naming_the_replays_route(
    client: TestClient, broker: Broker, trace_file: Path
) -> None:
    alice, trace = user_and_trace(client, trace_file)
    body = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
    keyed = {**alice, "Idempotency-Key": "replay-then-job"}
    assert client.post(REPLAYS, json=body, headers=keyed).status_code == 202
    r = client.post("/api/v1/jobs", json=job_spec(), headers=keyed)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["header", "Idempotency-Key"]
    assert error["input"] == "replay-then-job"
    assert error["msg"] == "already used for POST /api/v1/replays (keys last 24 h)"
    assert stored(client, Replay) == 1 and broker.queued() == 1
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        (claim,) = session.scalars(select(IdempotencyKey)).all()
    assert claim.scope == "replays" and claim.job_id is None


@pytest.mark.parametrize("key", ["", "x" * 256, "with space"])
def test_a_malformed_key_is_a_422_naming_the_header(
    client: TestClient, broker: Broker, trace_file: Path, key: str
) -> None:
    alice, trace = user_and_trace(client, trace_file)
    body = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
    r = client.post(REPLAYS, json=body, headers={**alice, "Idempotency-Key": key})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert broker.queued() == 0


def test_a_retry_after_a_503_queues_the_replay_once(
    pg_settings: Settings, broker: Broker, trace_file: Path
) -> None:
    down = pg_settings.model_copy(update={"broker_url": DEAD_REDIS_URL, "live": False})
    with TestClient(create_app(down)) as client:
        alice, trace = user_and_trace(client, trace_file)
        body = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
        keyed = {**alice, "Idempotency-Key": "after-503"}
        assert client.post(REPLAYS, json=body, headers=keyed).status_code == 503
        assert stored(client, Replay) == 0
        assert stored(client, IdempotencyKey) == 0  # the key was not used up
    with TestClient(create_app(broker.settings(pg_settings))) as client:
        retried = client.post(REPLAYS, json=body, headers=keyed)
        assert retried.status_code == 202, retried.text
        again = client.post(REPLAYS, json=body, headers=keyed)
        assert again.json() == retried.json()
        assert stored(client, Replay) == 1 and broker.queued() == 1
