"""A throwaway `gpuflow serve` for benchmarks: a scratch PostgreSQL database, an admin
token, and the server in its own process on a loopback port.

Used by bench/api.py (submission throughput) and bench/dashboard.py (the dashboard in
Chromium). `scratch_server(...)` is a context manager yielding a `Server`; on exit the
server is stopped and the database dropped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
SERVE = (
    "import sys, argparse; from gpuflow import serve_cmd; p = argparse.ArgumentParser(); "
    "serve_cmd.add_parsers(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); "
    "sys.exit(a.func(a))"
)
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1/test"


@dataclass(frozen=True)
class Server:
    url: str
    token: str
    proc: subprocess.Popen[bytes]
    log: Path  # the server's stderr (errors only: access lines go to stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not start")


@contextmanager
def scratch_server(
    serve_args: list[str], pg_admin_url: str = PG_ADMIN_URL, *, sqlite: bool = False
) -> Iterator[Server]:
    """`gpuflow serve SERVE_ARGS` on a new database (PostgreSQL, or SQLite in a temporary
    data dir if `sqlite`), with an admin `bench` signed in."""
    # Imported here: run as scripts, bench/ comes first on sys.path and bench/api.py
    # would hide the api package until the script has put the project root first.
    from api.http.security import create_admin
    from api.settings import Settings
    from api.store.db import make_engine, make_sessionmaker
    from api.store.migrations import upgrade

    db = f"gpuflow_bench_{uuid.uuid4().hex[:8]}"
    base = pg_admin_url.rpartition("/")[0]
    if not sqlite:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
    proc = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = None if sqlite else f"{base}/{db}"
            settings = Settings(database_url=url, data_dir=Path(tmp))
            engine = make_engine(settings)
            upgrade(engine)
            with make_sessionmaker(engine)() as session:
                token = create_admin(session, "bench", "bench")
            engine.dispose()
            port = free_port()
            env = {k: v for k, v in os.environ.items() if k != "GPUFLOW_DATABASE_URL"}
            if not sqlite:
                env["GPUFLOW_DATABASE_URL"] = settings.database_url or ""
            cmd = [sys.executable, "-c", SERVE, "serve", "--port", str(port)]
            cmd += ["--data-dir", tmp, *serve_args]
            log = Path(tmp) / "server.log"
            with log.open("wb") as err:
                proc = subprocess.Popen(
                    cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
                )
            url = f"http://127.0.0.1:{port}"
            wait_up(url, proc)
            yield Server(url, token, proc, log)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if not sqlite:
            with psycopg.connect(pg_admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
