"""Time limits on database calls: a hung PostgreSQL or a locked SQLite is a 503 within
the limit (api.db, api.errors), never a request that waits forever; the service
recovers once the database answers again.

The hang is real: the PostgreSQL processes serving the API's connections are stopped
(SIGSTOP) and continued (SIGCONT) in a finally. Only the backends of this session's own
database are stopped; the postmaster, shared with other test sessions, never is.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
from fastapi.testclient import TestClient
from httpx import Response

from api.app import create_app
from api.errors import DB_TIMEOUT_DETAIL
from api.settings import Settings
from tests.api.builders import auth, job_spec, wait_for
from tests.postgres import PG_ADMIN_URL

JOBS = "/api/v1/jobs"
NO_ANSWER_S = 120.0  # a request still unanswered after this hangs: the test fails
STOPPER_EVERY_S = 0.02  # a new backend is stopped within this (it waits on a lock)
# Short limits, so that the test waits seconds: statement 1 s + grace 2 s = 3 s.
LIMITS = {"db_statement_timeout_s": 1.0, "db_lock_timeout_s": 1.0, "db_hang_grace_s": 2.0}


class Stopper:
    """Keeps every client backend of a database stopped (SIGSTOP), those the pool opens
    meanwhile included, but one (`spared`); continues them all (SIGCONT) on `stop`."""

    def __init__(self, database: str, spared: int) -> None:
        self.database = database
        self.spared = spared
        self.stopped: list[int] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-stopper", daemon=True)

    def start(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            self._stop_new(admin)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=NO_ANSWER_S)
        for pid in self.stopped:
            os.kill(pid, signal.SIGCONT)

    def _run(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            while not self._done.wait(STOPPER_EVERY_S):
                self._stop_new(admin)

    def _stop_new(self, admin: psycopg.Connection[tuple[int]]) -> None:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> %s",
            (self.database, self.spared),
        ).fetchall()
        for (pid,) in rows:
            if pid not in self.stopped:
                os.kill(pid, signal.SIGSTOP)
                self.stopped.append(pid)


@contextmanager
def hung(database: str, spared: int) -> Iterator[Stopper]:
    stopper = Stopper(database, spared)
    try:
        stopper.start()
        yield stopper
    finally:
        stopper.stop()


def answered(call: Response | None) -> Response:
    assert call is not None
    return call


def test_a_hung_postgresql_is_a_503_within_the_limit_and_the_service_recovers(
    pg_settings: Settings,
) -> None:
    settings = pg_settings.model_copy(update={**LIMITS, "token_cache_s": 600.0})
    assert settings.database_url is not None
    database = settings.database_url.rpartition("/")[2]
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as pool:
        alice = auth(client, "alice", "vision")
        keyed = {**alice, "Idempotency-Key": "hung-1"}
        first = client.post(JOBS, json=job_spec(name="before"), headers=alice)
        assert first.status_code == 201, first.text  # the pool's connections are open
        # A transaction of the test's own holds `jobs`, so that a connection the pool
        # opens while the others are silent waits for it until it is stopped in turn.
        with psycopg.connect(settings.database_url) as locker:
            locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            with hung(database, spared=locker.info.backend_pid) as stopper:
                assert stopper.stopped  # the pool's connections
                pending = pool.submit(client.post, JOBS, json=job_spec(name="hung"), headers=keyed)
                refused = pending.result(timeout=NO_ANSWER_S)  # TimeoutError: it hangs
            locker.rollback()
        assert refused.status_code == 503, refused.text
        assert refused.json() == {"detail": DB_TIMEOUT_DETAIL}  # no host, port or SQL
        assert refused.headers["Retry-After"].isdigit()

        def retried() -> Response | None:
            r = client.post(JOBS, json=job_spec(name="hung"), headers=keyed)
            return r if r.status_code == 201 else None

        # The client retries with its key until the database answers again.
        stored = answered(wait_for(retried, timeout_s=60.0, every_s=0.5))
        again = client.post(JOBS, json=job_spec(name="hung"), headers=keyed)
        assert again.status_code == 201 and again.json() == stored.json()
        names = sorted(j["name"] for j in client.get(JOBS, headers=alice).json()["data"])
        assert names == ["before", "hung"]  # every retry of the key: one job
        assert client.get("/readyz").status_code == 200


def test_a_locked_sqlite_is_a_503_within_the_busy_timeout(sqlite_settings: Settings) -> None:
    settings = sqlite_settings.model_copy(update={**LIMITS, "token_cache_s": 600.0})
    with TestClient(create_app(settings)) as client, ThreadPoolExecutor(1) as pool:
        alice = auth(client, "alice", "vision")
        assert client.get(JOBS, headers=alice).status_code == 200  # the token is cached
        writer = sqlite3.connect(settings.data_dir / "gpuflow.db", isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # holds SQLite's one write lock
            pending = pool.submit(client.post, JOBS, json=job_spec(name="locked"), headers=alice)
            locked = pending.result(timeout=NO_ANSWER_S)
        finally:
            writer.rollback()
            writer.close()
        assert locked.status_code == 503, locked.text
        assert locked.json() == {"detail": DB_TIMEOUT_DETAIL}
        r = client.post(JOBS, json=job_spec(name="unlocked"), headers=alice)
        assert r.status_code == 201, r.text
