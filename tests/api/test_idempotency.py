"""POST /jobs with an Idempotency-Key: a retry answers as the first request and never
creates a second job (api.store.idempotency), also when the first attempt got a 503 or when
the same key arrives many times at once (claims go in the jobs' group commit)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select, update

from api.schemas.jobs import JobCreate
from api.settings import Settings
from api.store.db import make_engine
from api.store.idempotency import WINDOW, claim_batch, fingerprint, job_claim
from api.store.models import IdempotencyKey, Job, User, utcnow
from tests.api.builders import auth, job_spec, statements_failing

JOBS = "/api/v1/jobs"


def jobs_stored(client: TestClient) -> int:
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        return session.scalar(select(func.count()).select_from(Job)) or 0


@pytest.mark.parametrize("db", ["postgresql", "sqlite"])
def test_the_same_key_and_body_gets_the_first_answer_and_no_second_job(
    db: str, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue(
        "client" if db == "postgresql" else "sqlite_client"
    )
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "submit-7f3a"}
    first = client.post(JOBS, json=job_spec(), headers=keyed)
    again = client.post(JOBS, json=job_spec(), headers=keyed)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()  # the same id, metrics token, timestamps
    other = client.post(JOBS, json=job_spec(), headers={**alice, "Idempotency-Key": "another"})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    plain = client.post(JOBS, json=job_spec(), headers=alice)
    assert plain.status_code == 201
    assert jobs_stored(client) == 3


def test_keys_are_per_user(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    bob = auth(client, "bob", "vision")
    a = client.post(JOBS, json=job_spec(), headers={**alice, "Idempotency-Key": "k1"})
    b = client.post(JOBS, json=job_spec(), headers={**bob, "Idempotency-Key": "k1"})
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"] and b.json()["user_id"] != a.json()["user_id"]


def test_the_same_key_with_another_body_is_a_422_naming_the_header(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "k2"}
    assert client.post(JOBS, json=job_spec(num_gpus=1), headers=keyed).status_code == 201
    r = client.post(JOBS, json=job_spec(num_gpus=2), headers=keyed)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert jobs_stored(client) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "with space", "tab\there"])
def test_a_malformed_key_is_a_422_naming_the_header(client: TestClient, key: str) -> None:
    alice = auth(client, "alice", "vision")
    r = client.post(JOBS, json=job_spec(), headers={**alice, "Idempotency-Key": key})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


def test_a_retry_after_a_503_stores_the_job_once(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "retry-1"}
    engine = client.app.state.engine  # type: ignore[attr-defined]

    with statements_failing(engine, "INSERT INTO job_events"):
        failed = client.post(JOBS, json=job_spec(), headers=keyed)
    assert failed.status_code == 503 and jobs_stored(client) == 0
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        # The claim went with the job's transaction: the key is free for the retry.
        assert session.scalar(select(func.count()).select_from(IdempotencyKey)) == 0
    retried = client.post(JOBS, json=job_spec(), headers=keyed)
    assert retried.status_code == 201, retried.text
    again = client.post(JOBS, json=job_spec(), headers=keyed)
    assert again.json() == retried.json()
    assert jobs_stored(client) == 1


def test_a_claim_stored_without_its_job_is_completed_under_the_claimed_id(
    client: TestClient,
) -> None:
    # What a version that claimed keys in their own transaction left when the job's
    # commit then failed: the retry stores the job under the id the claim names.
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "old-1"}
    model = client.post(JOBS, json=job_spec(), headers=alice).json()  # a whole answer
    first = {**model, "id": uuid.uuid4().hex, "metrics_token": "t" * 43}
    body = fingerprint(JobCreate.model_validate(job_spec()).model_dump_json())
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        claim = job_claim(model["user_id"], "old-1", body, first)
        session.execute(insert(IdempotencyKey), [claim])
        session.commit()
    retried = client.post(JOBS, json=job_spec(), headers=keyed)
    assert retried.status_code == 201, retried.text
    assert retried.json()["id"] == first["id"]
    assert retried.json()["metrics_token"] == first["metrics_token"]
    assert client.post(JOBS, json=job_spec(), headers=keyed).json() == retried.json()
    assert jobs_stored(client) == 2


@pytest.mark.parametrize("db", ["postgresql", "sqlite"])
def test_concurrent_requests_with_one_key_store_one_job_and_answer_alike(
    db: str, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue(
        "client" if db == "postgresql" else "sqlite_client"
    )
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "burst-1"}
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda _: client.post(JOBS, json=job_spec(), headers=keyed), range(16))
        )
    assert {r.status_code for r in answers} == {201}
    assert len({r.text for r in answers}) == 1  # one id, one metrics token
    assert jobs_stored(client) == 1


def test_a_key_older_than_a_day_is_forgotten_and_claimed_anew(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    keyed = {**alice, "Idempotency-Key": "old-key"}
    first = client.post(JOBS, json=job_spec(num_gpus=1), headers=keyed)
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        session.execute(
            update(IdempotencyKey).values(created_at=utcnow() - WINDOW - timedelta(seconds=1))
        )
        session.commit()
    # Another body under the expired key: a new job, not a 422.
    again = client.post(JOBS, json=job_spec(num_gpus=2), headers=keyed)
    assert again.status_code == 201, again.text
    assert again.json()["id"] != first.json()["id"]
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        (claim,) = session.scalars(select(IdempotencyKey)).all()
    assert claim.job_id == again.json()["id"]
    assert jobs_stored(client) == 2


def test_a_key_claimed_by_a_transaction_in_flight_is_taken_once_it_commits(
    pg_settings: Settings,
) -> None:
    # Two processes' group commits claiming one key: the second waits for the first
    # transaction (no IntegrityError) and finds the key taken when it commits.
    engine = make_engine(pg_settings)
    try:
        with engine.connect() as conn:
            user_id = conn.execute(
                insert(User).values(name="alice", tenant="vision", role="user").returning(User.id)
            ).scalar_one()
            conn.commit()
        first, second = engine.connect(), engine.connect()
        try:
            claim = job_claim(user_id, "race-1", "f" * 64, {"id": "a" * 32})
            assert claim_batch(first, [claim]) == [True]  # not committed yet
            with ThreadPoolExecutor(1) as pool:
                other = job_claim(user_id, "race-1", "f" * 64, {"id": "b" * 32})
                waiting = pool.submit(claim_batch, second, [other])
                time.sleep(0.3)
                assert not waiting.done()  # blocked on the first transaction's row
                first.commit()
                assert waiting.result(timeout=10) == [False]
            second.commit()
        finally:
            first.close()
            second.close()
        with engine.connect() as conn:
            assert conn.execute(select(IdempotencyKey.job_id)).scalars().all() == ["a" * 32]
    finally:
        engine.dispose()
