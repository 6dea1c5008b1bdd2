"""Group commit of submissions (api.store.group_commit) and the token cache (api.http.security).

The writer runs against the real PostgreSQL and hands jobs to a real LiveCluster.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.http.security import TokenCache
from api.local_mode.backend import row_spec
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.group_commit import SubmitWriter, WriterStopped
from api.store.idempotency import KeyTaken, job_claim
from api.store.models import IdempotencyKey, Job, JobEvent, User, utcnow
from controller.live import LiveCluster
from controller.model.precision import DEFAULT_PRECISION
from controller.placement import ConsolidatedPlacer
from policies.registry import make_policy
from tests.api.builders import statements_failing
from tests.builders import make_cluster


@pytest.fixture()
def sessions(pg_settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(pg_settings)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture()
def user_id(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        user = User(name="alice", tenant="vision", role="user")
        session.add(user)
        session.commit()
        return user.id


@pytest.fixture()
def live() -> LiveCluster:
    cluster = make_cluster(nodes=2, gpus=4)
    return LiveCluster(cluster, make_policy("fifo"), ConsolidatedPlacer(cluster))


def _rows(user_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
    now = utcnow()
    job = {
        "id": uuid.uuid4().hex,
        "tenant": "vision",
        "user_id": user_id,
        "name": "train",
        "num_gpus": 2,
        "min_gpus": 2,
        "max_gpus": 2,
        "model": "resnet50",
        "duration_s": 100.0,
        "iterations": None,
        "batch_size": None,
        "gpu_mem_mib": None,
        "precision": str(DEFAULT_PRECISION),
        "priority": 0,
        "metrics_token_hash": "0" * 64,
        "status": "Queued",
        "progress": 0.0,
        "attained_gpu_s": 0.0,
        "restarts": 0,
        "nodes": "",
        "submit_s": 0.0,
        "created_at": now,
        "updated_at": now,
    }
    ev = {"job_id": job["id"], "kind": "submitted", "sim_s": 0.0, "detail": "", "at": now}
    return job, ev


Rows = list[tuple[dict[str, Any], dict[str, Any]]]


async def _persist_all(
    writer: SubmitWriter, rows: Rows, claims: list[dict[str, Any] | None] | None = None
) -> Any:
    claims = claims or [None] * len(rows)
    calls = (
        writer.persist(job, ev, row_spec(job), claim)
        for (job, ev), claim in zip(rows, claims, strict=True)
    )
    return await asyncio.gather(*calls, return_exceptions=True)


def _count(
    sessions: sessionmaker[Session], model: type[Job] | type[JobEvent] | type[IdempotencyKey]
) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_concurrent_submissions_share_commits_and_are_all_stored_then_scheduled(
    sessions: sessionmaker[Session], user_id: int, live: LiveCluster
) -> None:
    writer = SubmitWriter(sessions, live.add_jobs)
    rows = [_rows(user_id) for _ in range(40)]
    try:
        placed = asyncio.run(_persist_all(writer, rows))
    finally:
        writer.stop()
    assert [p.job_id for p in placed] == [job["id"] for job, _ in rows]
    assert writer.committed == 40 and writer.batches < 40  # some commits carried several
    assert _count(sessions, Job) == 40 and _count(sessions, JobEvent) == 40
    assert {s.job_id for s in live.jobs()} == {job["id"] for job, _ in rows}


def test_a_failed_commit_fails_every_request_of_the_batch_and_stores_none(
    pg_settings: Settings, user_id: int, live: LiveCluster
) -> None:
    engine = make_engine(pg_settings)

    with statements_failing(engine, "INSERT INTO job_events"):
        sessions = make_sessionmaker(engine)
        writer = SubmitWriter(sessions, live.add_jobs)
        try:
            results = asyncio.run(_persist_all(writer, [_rows(user_id) for _ in range(10)]))
        finally:
            writer.stop()
    assert all(isinstance(r, OperationalError) for r in results)
    assert _count(sessions, Job) == 0 and live.jobs() == []
    engine.dispose()


def test_one_refused_row_does_not_fail_its_neighbours(
    sessions: sessionmaker[Session], user_id: int, live: LiveCluster
) -> None:
    rows = [_rows(user_id) for _ in range(6)]
    rows[3][0]["user_id"] = user_id + 1000  # no such user: a foreign-key violation
    writer = SubmitWriter(sessions, live.add_jobs)
    try:
        results = asyncio.run(_persist_all(writer, rows))
    finally:
        writer.stop()
    assert isinstance(results[3], IntegrityError)
    assert sum(1 for r in results if not isinstance(r, Exception)) == 5
    assert _count(sessions, Job) == 5 and len(live.jobs()) == 5


def _claim(user_id: int, key: str, job: dict[str, Any]) -> dict[str, Any]:
    return job_claim(user_id, key, "f" * 64, {"id": job["id"]})


def test_keyed_submissions_commit_with_their_claims_and_a_taken_key_stores_nothing(
    sessions: sessionmaker[Session], user_id: int, live: LiveCluster
) -> None:
    # 30 keyed submissions, three of each key pair k0..k9 sent together: the first of
    # each key is stored with its claim, the two others get KeyTaken and store nothing.
    rows = [_rows(user_id) for _ in range(30)]
    claims: list[dict[str, Any] | None] = [
        _claim(user_id, f"k{i % 10}", job) for i, (job, _) in enumerate(rows)
    ]
    writer = SubmitWriter(sessions, live.add_jobs)
    try:
        results = asyncio.run(_persist_all(writer, rows, claims))
        # A key claimed in an earlier batch is taken too.
        again = asyncio.run(
            _persist_all(writer, [_rows(user_id)], [_claim(user_id, "k3", {"id": "x"})])
        )
    finally:
        writer.stop()
    stored = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
    assert stored == list(range(10))
    assert all(isinstance(r, KeyTaken) for r in results[10:]) and isinstance(again[0], KeyTaken)
    assert _count(sessions, Job) == 10 and _count(sessions, IdempotencyKey) == 10
    assert writer.batches < 30  # claims went in the batches, not a transaction each
    with sessions() as session:
        by_key = dict(session.execute(select(IdempotencyKey.key, IdempotencyKey.job_id)).all())
    assert by_key == {f"k{i}": rows[i][0]["id"] for i in range(10)}
    assert {s.job_id for s in live.jobs()} == {rows[i][0]["id"] for i in range(10)}


def test_a_failed_commit_stores_neither_the_jobs_nor_their_claims(
    pg_settings: Settings, user_id: int, live: LiveCluster
) -> None:
    engine = make_engine(pg_settings)
    sessions = make_sessionmaker(engine)
    rows = [_rows(user_id) for _ in range(5)]
    claims: list[dict[str, Any] | None] = [
        _claim(user_id, f"k{i}", job) for i, (job, _) in enumerate(rows)
    ]
    with statements_failing(engine, "INSERT INTO job_events"):
        writer = SubmitWriter(sessions, live.add_jobs)
        try:
            results = asyncio.run(_persist_all(writer, rows, claims))
        finally:
            writer.stop()
    assert all(isinstance(r, OperationalError) for r in results)
    assert _count(sessions, Job) == 0 and _count(sessions, IdempotencyKey) == 0
    engine.dispose()


def test_a_stopped_writer_refuses_new_submissions(
    sessions: sessionmaker[Session], user_id: int, live: LiveCluster
) -> None:
    writer = SubmitWriter(sessions, live.add_jobs)
    writer.stop()
    (result,) = asyncio.run(_persist_all(writer, [_rows(user_id)]))
    assert isinstance(result, WriterStopped) and _count(sessions, Job) == 0


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _user(name: str) -> User:
    return User(id=1, name=name, tenant="t", role="user")


def test_the_token_cache_expires_forgets_and_drops_lookups_raced_by_a_revoke() -> None:
    clock = _Clock()
    cache = TokenCache(ttl_s=5.0, clock=clock)
    cache.put("a", _user("alice"), cache.generation())
    assert cache.get("a") is not None and cache.get("b") is None
    clock.t = 5.0
    assert cache.get("a") is None  # expired
    cache.put("a", _user("alice"), cache.generation())
    cache.forget("a")
    assert cache.get("a") is None  # revoked
    before = cache.generation()  # a lookup starts ...
    cache.forget("b")  # ... a revoke commits meanwhile ...
    cache.put("a", _user("alice"), before)  # ... so its (maybe stale) answer is not kept
    assert cache.get("a") is None
    off = TokenCache(ttl_s=0.0)
    off.put("a", _user("alice"), off.generation())
    assert off.get("a") is None
