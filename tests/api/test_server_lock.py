"""The server lock (api.local_mode.server_lock) on its own: one holder per database on SQLite and
PostgreSQL, released with its holder; on PostgreSQL a session that ends (a database
restart, a terminated backend) is noticed and the lock taken again, or, if another
server took it meanwhile, the holder is told. Servers end to end:
tests/gpuflow/test_serve_restart.py."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from api.local_mode import server_lock
from api.local_mode.server_lock import APP_PREFIX, ServerLockHeld
from api.settings import Settings
from tests.api.builders import wait_for
from tests.postgres import PG_ADMIN_URL, migrated_database

WATCH_S = 0.2


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path)
        return
    with migrated_database("gpuflow_lock") as url:
        yield Settings(data_dir=tmp_path, database_url=url)


def test_one_holder_at_a_time_named_to_the_next(settings: Settings) -> None:
    first = server_lock.acquire(settings)
    with pytest.raises(ServerLockHeld) as held:
        server_lock.acquire(settings)
    message = str(held.value)
    assert message.startswith(
        "another gpuflow serve holds this database: "
        f"host {socket.gethostname()}, pid {os.getpid()}, since "
    ), message
    first.release()
    server_lock.acquire(settings).release()  # free again once released


def _lock_backends(database: str) -> list[int]:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.datname = %s"
            " AND a.application_name LIKE %s",
            (database, f"{APP_PREFIX}%"),
        ).fetchall()
    return [pid for (pid,) in rows]


def _terminate(pid: int) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_lost_session_is_noticed_and_the_lock_taken_again(tmp_path: Path) -> None:
    with migrated_database("gpuflow_relock") as url:
        database = url.rpartition("/")[2]
        lost: list[str] = []
        lock = server_lock.acquire(
            Settings(data_dir=tmp_path, database_url=url), lost.append, WATCH_S
        )
        try:
            (first,) = _lock_backends(database)
            _terminate(first)
            again = wait_for(lambda: [p for p in _lock_backends(database) if p != first])
            assert len(again) == 1 and not lost
        finally:
            lock.release()


def test_a_lock_another_server_took_meanwhile_is_reported_lost(tmp_path: Path) -> None:
    with migrated_database("gpuflow_lostlock") as url:
        settings = Settings(data_dir=tmp_path, database_url=url)
        told = threading.Event()
        lost: list[str] = []

        def on_lost(message: str) -> None:
            lost.append(message)
            told.set()

        lock = server_lock.acquire(settings, on_lost, watch_every_s=2.0)
        (first,) = _lock_backends(url.rpartition("/")[2])
        _terminate(first)
        wait_for(lambda: not _lock_backends(url.rpartition("/")[2]))
        other = server_lock.acquire(settings)  # before the watcher's next look
        try:
            assert told.wait(timeout=30.0)
            assert lost[0].startswith("another gpuflow serve holds this database: host ")
        finally:
            other.release()
            lock.release()
