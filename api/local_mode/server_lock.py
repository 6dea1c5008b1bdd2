"""One local-mode server per job database: `gpuflow serve` holds this lock while it
runs, taken before it migrates or reads anything.

Local mode keeps one scheduler over the database's jobs; a second one on the same
database would resubmit the first one's running jobs and schedule them twice. The
lock dies with its holder, however it dies (a kill -9 included), so nothing is left
to expire:

- PostgreSQL: a session advisory lock (`pg_try_advisory_lock`, scoped to the
  database) on a connection of its own, whose `application_name` says who holds it
  (host, pid, since); a refused server reads it from `pg_stat_activity`.
- SQLite: an exclusive `flock` on `<database file>.serve.lock`, which holds the same
  three facts as JSON.

PostgreSQL ends the session, and with it the lock, when the server restarts or the
connection drops: a watcher checks the lock's connection every WATCH_EVERY_S and takes
the lock again on a new one; if another server took it meanwhile, `on_lost` is called
(gpuflow serve then stops: two schedulers must not share the jobs).

Called by gpuflow.serve_cmd.cmd_serve; a refusal is `ServerLockHeld`, one line.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psycopg
from sqlalchemy.engine import make_url

from api.settings import Settings
from api.store.db import AnsweringConnection

log = logging.getLogger(__name__)

# The advisory lock's key: any constant of our own (pg_locks shows it as objid).
ADVISORY_KEY = 0x67706600  # "gpf\0"
APP_PREFIX = "gpuflow-serve"
APP_NAME_MAX = 63  # PostgreSQL keeps NAMEDATALEN - 1 bytes of application_name
SINCE_FORMAT = "%Y%m%dT%H%M%SZ"
# How often the advisory lock's connection is checked: a server restart that ended the
# session is found within this, well before a second `gpuflow serve` is likely started.
WATCH_EVERY_S = 5.0


class ServerLockHeld(RuntimeError):
    """Another server holds the database: the message names it."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    since: datetime

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since:%Y-%m-%dT%H:%M:%SZ}"


class ServerLock:
    """Held from `acquire` until `release` (or the process's end)."""

    def __init__(self, release: Any) -> None:
        self._release = release

    def release(self) -> None:
        self._release()


def acquire(
    settings: Settings,
    on_lost: Callable[[str], None] | None = None,
    watch_every_s: float = WATCH_EVERY_S,
) -> ServerLock:
    """Take the database's server lock; ServerLockHeld naming the holder if taken.
    PostgreSQL: `on_lost(message)` if another server takes it after a lost session."""
    me = Holder(socket.gethostname(), os.getpid(), datetime.now(UTC).replace(microsecond=0))
    url = make_url(settings.sqlalchemy_url())
    if url.get_backend_name() == "sqlite":
        return _acquire_file(Path(str(url.database)), me)
    lock = _AdvisoryLock(settings, me, on_lost or (lambda message: None), watch_every_s)
    return ServerLock(lock.release)


class _AdvisoryLock:
    """The advisory lock on a connection of its own, watched and taken again if its
    session ends (closing the connection releases the lock)."""

    def __init__(
        self,
        settings: Settings,
        me: Holder,
        on_lost: Callable[[str], None],
        watch_every_s: float,
    ) -> None:
        url = make_url(settings.sqlalchemy_url()).set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._name = f"{APP_PREFIX} {me.pid} {me.since:{SINCE_FORMAT}} {me.host}"[:APP_NAME_MAX]
        self._connect_timeout_s = settings.db_connect_timeout_s
        self._answer_timeout_s = settings.db_statement_timeout_s + settings.db_hang_grace_s
        self._on_lost = on_lost
        self._done = threading.Event()
        self._conn = self._take()  # ServerLockHeld, or the database's OperationalError
        self._watch_every_s = watch_every_s
        threading.Thread(target=self._watch, name="gpuflow-server-lock", daemon=True).start()

    def release(self) -> None:
        self._done.set()
        self._conn.close()

    def _take(self) -> psycopg.Connection[Any]:
        conn = AnsweringConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=self._name,
            connect_timeout=self._connect_timeout_s,
        )
        conn.answer_timeout_s = self._answer_timeout_s
        try:
            taken = conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_KEY,)).fetchone()
            if taken is None or not taken[0]:
                raise ServerLockHeld(_advisory_holder(conn))
        except BaseException:
            conn.close()
            raise
        return conn

    def _watch(self) -> None:
        while not self._done.wait(self._watch_every_s):
            try:
                self._conn.execute("SELECT 1")
                continue
            except psycopg.Error:
                self._conn.close()
            try:
                self._conn = self._take()
                log.warning("the server lock's session ended; lock taken again")
            except ServerLockHeld as exc:
                log.error("server lock lost: %s", exc)
                self._on_lost(str(exc))
                return
            except psycopg.Error as exc:  # the database is still away: try again
                log.warning("server lock's session ended, database unavailable: %s", exc)


def _advisory_holder(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(
        "SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l"
        " JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.objid = %s AND l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (ADVISORY_KEY,),
    ).fetchone()
    if row is None:
        return "another gpuflow serve holds this database (it is ending: try again)"
    app, addr, started = row
    parts = str(app or "").split(" ", 3)
    if len(parts) == 4 and parts[0] == APP_PREFIX and parts[1].isdigit():
        since = datetime.strptime(parts[2], SINCE_FORMAT).replace(tzinfo=UTC)
        holder = Holder(parts[3], int(parts[1]), since).describe()
    else:
        holder = f"a client at {addr or 'local socket'}, since {started:%Y-%m-%dT%H:%M:%SZ}"
    return f"another gpuflow serve holds this database: {holder}"


def _acquire_file(database: Path, me: Holder) -> ServerLock:
    path = database.with_name(database.name + ".serve.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle: IO[str] = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        said = handle.read()
        handle.close()
        holder = _file_holder(said)
        raise ServerLockHeld(f"another gpuflow serve holds this database: {holder}") from None
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"host": me.host, "pid": me.pid, "since": me.since.isoformat()}))
    handle.flush()
    return ServerLock(handle.close)  # the flock goes with the file's last descriptor


def _file_holder(text: str) -> str:
    try:
        data = json.loads(text)
        since = datetime.fromisoformat(data["since"]).astimezone(UTC)
        return Holder(str(data["host"]), int(data["pid"]), since).describe()
    except (ValueError, KeyError, TypeError):
        return "(its lock file says nothing readable)"
