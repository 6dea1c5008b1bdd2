"""Fixtures for the service tests: real PostgreSQL, Redis and a Celery worker process.

PostgreSQL: one fresh database per test session (migrated with Alembic), every table
truncated after each test. Redis: a key prefix and a queue name unique to the session.
SQLite tests get a fresh file per test. Services: 127.0.0.1:5432 (database `test`
reachable to create ours) and 127.0.0.1:6379; override with GPUFLOW_TEST_PG_ADMIN_URL
and GPUFLOW_TEST_REDIS_URL. Cluster mode: `kube_cluster` (tests/conftest.py), the
session's real Kubernetes control plane.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from tests.api.builders import auth, migrated_sqlite
from tests.postgres import RUN_ID, migrated_database, truncate_all

REDIS_URL = os.environ.get("GPUFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DEAD_PG_URL = "postgresql://postgres@127.0.0.1:1/none"
DEAD_REDIS_URL = "redis://127.0.0.1:1/0"


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with migrated_database("gpuflow_test") as url:
        yield url


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("service")


@pytest.fixture()
def pg_settings(pg_url: str, session_dir: Path) -> Iterator[Settings]:
    settings = Settings(
        database_url=pg_url,
        data_dir=session_dir,
        cluster="2x4",
        time_scale=100.0,
        round_interval_s=0.0,
        sync_interval_s=0.05,
    )
    yield settings
    truncate_all(settings)


@pytest.fixture()
def sqlite_settings(tmp_path: Path) -> Settings:
    return migrated_sqlite(tmp_path)


@pytest.fixture()
def client(pg_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(pg_settings)) as c:
        yield c


@pytest.fixture()
def sqlite_client(sqlite_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(sqlite_settings)) as c:
        yield c


@pytest.fixture()
def admin(client: TestClient) -> dict[str, str]:
    return auth(client, "root", "ops", "admin")


@pytest.fixture(scope="session")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "small.csv"
    write_canonical(path, generate(40, seed=3, cluster_gpus=8, load=0.8))
    return path


@pytest.fixture(scope="session")
def worker_settings(pg_url: str, session_dir: Path) -> Settings:
    return Settings(
        database_url=pg_url,
        data_dir=session_dir,
        broker_url=REDIS_URL,
        broker_key_prefix=f"gpuflow-test-{RUN_ID}:",
        celery_queue=f"gpuflow-test-{RUN_ID}",
        cluster="2x4",
        live=False,
    )


@pytest.fixture(scope="session")
def celery_worker(worker_settings: Settings, session_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A real worker process on a queue of its own; stopped after the session."""
    proc = start_celery_worker(worker_settings, session_dir / "worker.log")
    yield proc
    stop_process(proc)


def start_celery_worker(
    settings: Settings, log: Path, *options: str, name: str = f"test-{RUN_ID}"
) -> subprocess.Popen[str]:
    """`celery -A api.tasks worker` (one solo slot) on settings' queue, configured by
    GPUFLOW_* as in production, once it has logged that it is ready."""
    env = {**os.environ}
    for key, value in settings.model_dump().items():
        if value is not None:
            env[f"GPUFLOW_{key.upper()}"] = str(value)
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "api.tasks",
        "worker",
        "--pool=solo",
        "-c",
        "1",
        "-Q",
        settings.celery_queue,
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "info",
        f"--logfile={log}",
        *options,
    ]
    proc = subprocess.Popen(cmd, env=env, text=True)
    deadline = time.monotonic() + 60
    while "ready." not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            pytest.fail(f"celery worker did not start:\n{log.read_text() if log.exists() else ''}")
        time.sleep(0.2)
    return proc


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 20 s; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
