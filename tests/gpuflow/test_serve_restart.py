"""`gpuflow serve` in local mode across a kill -9, on SQLite and PostgreSQL: the
policy an admin switched to, a cordon and the simulated clock come back, and no
job's timeline runs backwards (api.local_mode.state); a second server on the same
database refuses to start, naming the one that holds it, and changes no row
(api.local_mode.server_lock). Real server processes throughout."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from api.http.security import create_admin
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.models import Base
from tests.api.builders import wait_for
from tests.postgres import migrated_database

REPO = Path(__file__).resolve().parents[2]
API = "/api/v1"
TIME_SCALE = 1000.0  # an hour of simulated time in 3.6 wall seconds
HOUR_S = 3600.0
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Database:
    settings: Settings  # for the test's own reads and the admin it creates
    env: dict[str, str]  # for the servers


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    env = {**os.environ, "GPUFLOW_SYNC_INTERVAL_S": "0.05", "GPUFLOW_ROUND_INTERVAL_S": "0"}
    if request.param == "sqlite":
        yield Database(Settings(data_dir=tmp_path), env)
        return
    with migrated_database("gpuflow_restart") as url:
        yield Database(
            Settings(data_dir=tmp_path, database_url=url), {**env, "GPUFLOW_DATABASE_URL": url}
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """`python -m gpuflow.cli serve` on a port of its own."""

    def __init__(self, db: Database) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable, "-m", "gpuflow.cli", "serve", "--cluster", "2x4",
            "--port", str(self.port), "--time-scale", str(TIME_SCALE),
            "--data-dir", str(db.settings.data_dir),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=db.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, self.proc.stderr.read() if self.proc.stderr else ""
            try:
                return httpx.get(f"{self.url}/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, timeout_s=START_TIMEOUT_S, every_s=0.2)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture()
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in started:
            server.kill()


def _admin(db: Database) -> dict[str, str]:
    engine = make_engine(db.settings)
    with make_sessionmaker(engine)() as session:
        token = create_admin(session, "root", "ops")
    engine.dispose()
    return {"Authorization": f"Bearer {token}"}


def _get(server: Server, path: str, admin: dict[str, str]) -> Any:
    r = httpx.get(f"{server.url}{API}{path}", headers=admin)
    assert r.status_code == 200, r.text
    return r.json()


def _submit(server: Server, admin: dict[str, str], name: str, gpus: int, duration_s: float) -> str:
    body = {"name": name, "num_gpus": gpus, "duration_s": duration_s}
    r = httpx.post(f"{server.url}{API}/jobs", json=body, headers=admin)
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    return job_id


def _up(database: Database, servers: list[Server]) -> Server:
    """A server started on `database`, up; `servers` stops it after the test."""
    server = Server(database)
    servers.append(server)
    server.wait_up()
    return server


def _now_s(server: Server, admin: dict[str, str]) -> float:
    now: float = _get(server, "/cluster", admin)["now_s"]
    return now


def test_a_killed_server_comes_back_with_its_policy_cordon_and_clock(
    database: Database, servers: list[Server]
) -> None:
    first = _up(database, servers)
    admin = _admin(database)
    r = httpx.post(f"{first.url}{API}/nodes/node-1/cordon", headers=admin)
    assert r.status_code == 200 and r.json()["state"] == "cordoned", r.text
    r = httpx.put(f"{first.url}{API}/policies/active", json={"name": "srtf"}, headers=admin)
    assert r.status_code == 200 and r.json()["name"] == "srtf", r.text
    jobs = [
        _submit(first, admin, "short", 2, 600.0),  # ends within the first hour
        _submit(first, admin, "long", 2, 1e7),  # runs on node-0 across the restart
        _submit(first, admin, "behind", 4, 1e7),  # waits: node-1 is cordoned
    ]
    wait_for(lambda: _now_s(first, admin) > HOUR_S, timeout_s=60.0, every_s=0.2)
    before_s = _now_s(first, admin)
    # The clock is stored each second: wait past the next store, then kill.
    wait_for(lambda: _now_s(first, admin) > before_s + 2 * TIME_SCALE, timeout_s=30.0)
    before_s = _now_s(first, admin)
    first.kill()

    second = _up(database, servers)
    assert _now_s(second, admin) >= before_s - TIME_SCALE  # at most a second's store behind
    assert _get(second, "/policies/active", admin)["name"] == "srtf"
    nodes = {n["name"]: n["state"] for n in _get(second, "/nodes", admin)["data"]}
    assert nodes == {"node-0": "ready", "node-1": "cordoned"}

    def placed() -> list[tuple[str, str]] | None:
        got = [(j["status"], j["nodes"]) for j in (_get(second, f"/jobs/{i}", admin) for i in jobs)]
        return got if got[1][0] == "Running" else None

    # The long job, resubmitted, runs on node-0 again; the one behind it still waits,
    # node-1 being cordoned still.
    assert wait_for(placed, timeout_s=30.0) == [
        ("Succeeded", ""), ("Running", "node-0"), ("Queued", ""),
    ]  # fmt: skip
    for job_id in jobs:
        times = [e["sim_s"] for e in _get(second, f"/jobs/{job_id}/events", admin)["data"]]
        assert len(times) >= 2 and times == sorted(times), (job_id, times)


def _rows(settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    engine = make_engine(settings)
    with engine.connect() as conn:
        rows = {
            t.name: sorted((tuple(r) for r in conn.execute(select(t))), key=repr)
            for t in Base.metadata.sorted_tables
        }
    engine.dispose()
    return rows


def test_a_second_server_refuses_naming_the_first_and_changes_nothing(
    database: Database, servers: list[Server]
) -> None:
    first = _up(database, servers)
    admin = _admin(database)
    _submit(first, admin, "running", 4, 1e7)
    wait_for(lambda: _get(first, "/jobs?status=Running", admin)["count"] == 1, timeout_s=30.0)
    # The first server stopped (SIGSTOP), so that its own writes do not move the rows.
    first.proc.send_signal(signal.SIGSTOP)
    try:
        before = _rows(database.settings)
        second = Server(database)
        servers.append(second)
        code = second.proc.wait(timeout=START_TIMEOUT_S)
        err = second.proc.stderr.read() if second.proc.stderr else ""
        after = _rows(database.settings)
    finally:
        first.proc.send_signal(signal.SIGCONT)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    host = socket.gethostname()
    assert err.startswith(
        f"gpuflow: error: another gpuflow serve holds this database: host {host[:30]}, "
        f"pid {first.proc.pid}, since "
    ), err
    assert after == before and before["jobs"]  # not one row written
    assert _get(first, "/jobs?status=Running", admin)["count"] == 1
