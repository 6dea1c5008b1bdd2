"""Time limits on database calls: a hung PostgreSQL or a locked SQLite is a 503 within
the limit (api.store.db, api.http.errors), never a request that waits forever; the service
recovers once the database answers again.

The hang is real: the PostgreSQL processes serving the API's connections are stopped
(SIGSTOP) and continued (SIGCONT) in a finally. Only the backends of this session's own
database are stopped; the postmaster, shared with other test sessions, never is. A
whole server gone silent (postmaster included: new connections hang too) is a TCP
proxy in front of PostgreSQL that stops forwarding.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.engine import make_url

from api.app import create_app
from api.http.errors import DB_TIMEOUT_DETAIL, RETRY_AFTER_S
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


class SilentProxy:
    """A TCP proxy to PostgreSQL that can go silent: while `silent`, it forwards
    nothing either way and accepts new connections without answering, the sockets kept
    open, as a hung server's kernel does; `speak` closes what it held and forwards again."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.silent = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, name="pg-proxy", daemon=True).start()

    def speak(self) -> None:
        self.silent.clear()
        for sock in self.held:
            sock.close()
        self.held.clear()

    def close(self) -> None:
        self.speak()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.held.append(client)
            if self.silent.is_set():
                continue
            upstream = socket.create_connection(self.upstream)
            self.held.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self.silent.is_set():
                    time.sleep(0.01)  # hold it: nothing goes through while silent
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            sock.close()


# statement 3 s + grace 1 s: the documented bound is 4 s. The pool's ping of an idle
# connection waits the grace, then a new connection the connect timeout (1 + 2 s).
SILENT_LIMITS = {
    "db_statement_timeout_s": 3.0,
    "db_lock_timeout_s": 1.0,
    "db_hang_grace_s": 1.0,
    "db_connect_timeout_s": 2,
}
BOUND_SLACK_S = 1.5  # a loaded 2-core machine; the old ping + connect took 4 + 2 = 6 s


def test_a_silent_postgresql_is_a_503_within_statement_timeout_plus_grace(
    pg_settings: Settings,
) -> None:
    assert pg_settings.database_url is not None
    url = make_url(pg_settings.database_url)
    proxy = SilentProxy(url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    update = {**SILENT_LIMITS, "token_cache_s": 600.0, "database_url": proxied}
    settings = pg_settings.model_copy(update=update)
    bound_s = settings.db_statement_timeout_s + settings.db_hang_grace_s
    with TestClient(create_app(settings)) as client:
        alice = auth(client, "alice", "vision")
        assert client.post(JOBS, json=job_spec(name="before"), headers=alice).status_code == 201
        proxy.silent.set()
        try:
            for call in (
                lambda: client.get(JOBS, headers=alice),
                lambda: client.post(JOBS, json=job_spec(name="silent"), headers=alice),
            ):
                started = time.monotonic()
                refused = call()
                took_s = time.monotonic() - started
                assert refused.status_code == 503, refused.text
                assert refused.json() == {"detail": DB_TIMEOUT_DETAIL}
                assert refused.headers["Retry-After"] == str(RETRY_AFTER_S)
                assert took_s <= bound_s + BOUND_SLACK_S, took_s
        finally:
            proxy.speak()

        def listed() -> Response | None:
            r = client.get(JOBS, headers=alice)
            return r if r.status_code == 200 else None

        back = answered(wait_for(listed, timeout_s=30.0, every_s=0.5))
        names = [j["name"] for j in back.json()["data"]]
        assert names == ["before"]
    proxy.close()


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
        assert refused.headers["Retry-After"] == str(RETRY_AFTER_S)

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
        assert locked.headers["Retry-After"] == str(RETRY_AFTER_S)
        r = client.post(JOBS, json=job_spec(name="unlocked"), headers=alice)
        assert r.status_code == 201, r.text
