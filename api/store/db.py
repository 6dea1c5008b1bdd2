"""Engine and sessions: built by `create_app` (or the worker) from Settings.

Routes get a session per request through `get_db` (api.deps.SessionDep).

Every database call has a time limit (settings.db_*): PostgreSQL cancels a statement
or a lock wait that runs too long (`statement_timeout`, `lock_timeout`, set on each
connection as it opens); a server that does not answer at all — hung, stopped, its
host gone without a reset — is given up by the client (`AnsweringConnection`), which
the server-side limits cannot do. Opening a connection and waiting for a free one in
the pool are limited too. Each of these is an OperationalError or a pool TimeoutError,
which api.http.errors answers with a 503.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from fastapi import Request
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings

# Local mode's threadpool runs up to 40 requests at once; 20 connections plus 10 of
# overflow keep a 2-core PostgreSQL busy without queueing on the pool (bench/api.py).
POOL_SIZE = 20
MAX_OVERFLOW = 10
WAIT_POLL_S = 0.1  # psycopg's own interval between checks of a pending wait


class DatabaseNotAnswering(psycopg.OperationalError):
    """The server took longer than the connection's answer limit: the connection is
    closed (its protocol state is unknown) and the pool replaces it."""


class AnsweringConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait on the server (query, fetch, commit,
    rollback, the pool's ping) ends after `answer_timeout_s`.

    psycopg waits on the socket with no limit; a stopped server process keeps its
    socket open and its kernel acknowledges what is sent, so neither TCP keepalives nor
    the server's own timeouts end that wait."""

    answer_timeout_s: float | None = None

    def wait(self, gen: Any, interval: float = WAIT_POLL_S, timeout: float | None = None) -> Any:
        limit = self.answer_timeout_s if timeout is None else timeout
        try:
            return super().wait(gen, interval, limit)
        except psycopg.errors._WaitTimeout:  # psycopg's documented timeout of `wait`
            self.pgconn.finish()
            raise DatabaseNotAnswering(f"the database did not answer within {limit} s") from None


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url()
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": settings.db_lock_timeout_s},
            pool_timeout=settings.db_pool_timeout_s,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    limits = (
        f"-c statement_timeout={_ms(settings.db_statement_timeout_s)}"
        f" -c lock_timeout={_ms(settings.db_lock_timeout_s)}"
    )
    engine = create_engine(
        url,
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        pool_pre_ping=True,
        pool_timeout=settings.db_pool_timeout_s,
        connect_args={"connect_timeout": settings.db_connect_timeout_s, "options": limits},
    )
    # Past the statement limit the server cancels the statement itself (a clean error,
    # the connection stays usable); the client gives up only on a server that is silent.
    answer_timeout_s = settings.db_statement_timeout_s + settings.db_hang_grace_s

    @event.listens_for(engine, "do_connect")
    def _answering(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        conn = AnsweringConnection.connect(*cargs, **cparams)
        conn.answer_timeout_s = answer_timeout_s
        return conn

    _quick_pings(engine, settings.db_hang_grace_s)
    return engine


def _quick_pings(engine: Engine, limit_s: float) -> None:
    """The pool's check of an idle connection (`SELECT 1`) waits `limit_s`, not a
    statement's limit: a silent server found by the ping is followed by a new
    connection (up to the connect timeout), and ping plus connect must stay within
    statement timeout + grace, the bound docs/api.md states (35 s by default; with
    the full limit on the ping it was 35 + 5 = 40 s)."""
    dialect = engine.dialect
    ping = dialect.do_ping

    def do_ping(dbapi_connection: Any) -> bool:
        answering = dbapi_connection if isinstance(dbapi_connection, AnsweringConnection) else None
        if answering is None:
            return ping(dbapi_connection)
        full = answering.answer_timeout_s
        answering.answer_timeout_s = limit_s
        try:
            return ping(dbapi_connection)
        finally:
            answering.answer_timeout_s = full

    dialect.do_ping = do_ping  # type: ignore[method-assign]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def get_db(request: Request) -> Iterator[Session]:
    factory: sessionmaker[Session] = request.app.state.sessions
    with factory() as session:
        yield session
