"""Nothing stranded (issue 28): a real Celery worker, and a real Redis of this test's
own (never the shared one) restarted empty mid-sweep. The task it held is lost; the
reconciler (api.replays.reconcile) finds the replay sent and never started and the
dispatcher sends it again, so every replay of the sweep ends, and the tenant, whose
cap the sweep filled, can submit again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from api.store.models import Replay
from tests.api.builders import auth, upload_trace, wait_for
from tests.api.conftest import start_celery_worker, stop_process

REPLAYS = "/api/v1/replays"
START_TIMEOUT_S = 4.0  # a replay here runs in about a second
RECONCILE_EVERY_S = 0.5
MAX_DISPATCHES = 3


class OwnRedis:
    """redis-server on a free port with no persistence: a restart comes back empty."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.folder = folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[str]:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(["redis-server", *args], stdout=subprocess.DEVNULL, text=True)
        with redis.Redis.from_url(self.url) as client:
            wait_for(lambda: self._answers(client), timeout_s=20)
        return proc

    @staticmethod
    def _answers(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def restart_empty(self) -> None:
        stop_process(self.proc)
        self.proc = self._start()

    def queued(self, queue: str) -> int:
        with redis.Redis.from_url(self.url) as client:
            return int(client.llen(queue))


@pytest.fixture()
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    yield server
    stop_process(server.proc)


@pytest.fixture()
def settings(pg_settings: Settings, own_redis: OwnRedis) -> Settings:
    return pg_settings.model_copy(
        update={
            "broker_url": own_redis.url,
            "celery_queue": "lost",
            "live": False,
            # Two sent at a time to one worker slot: one task always waits in Redis.
            "replay_concurrency": 2,
            "replay_start_timeout_s": START_TIMEOUT_S,
            "replay_reconcile_every_s": RECONCILE_EVERY_S,
            "replay_max_dispatches": MAX_DISPATCHES,
            "max_active_replays_per_tenant": 6,
        }
    )


def _rows(client: TestClient) -> list[Replay]:
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        return list(session.query(Replay).order_by(Replay.id))


def _stop_with_a_task_in_redis(
    client: TestClient, worker: subprocess.Popen[str], own_redis: OwnRedis
) -> None:
    """Freeze the worker while it runs a replay and another's task waits in Redis."""

    def frozen_so() -> bool:
        os.kill(worker.pid, signal.SIGSTOP)
        rows = _rows(client)
        running = [r for r in rows if r.status == "running"]
        sent = [r for r in rows if r.status == "queued" and r.dispatched_at]
        if running and sent and own_redis.queued("lost") == 1:
            return True
        os.kill(worker.pid, signal.SIGCONT)
        return False

    wait_for(frozen_so, timeout_s=60, every_s=0.1)


def test_a_redis_restarted_empty_mid_sweep_strands_no_replay(
    settings: Settings, own_redis: OwnRedis, trace_file: Path, tmp_path: Path
) -> None:
    worker = start_celery_worker(
        settings, tmp_path / "worker.log", "--prefetch-multiplier=1", name="lost"
    )
    try:
        with TestClient(create_app(settings)) as client:
            alice = auth(client, "alice", "vision")
            trace = upload_trace(client, alice, trace_file)["id"]
            body = {"trace_ids": [trace], "policies": ["fifo", "srtf", "tiresias"]}
            r = client.post(
                f"{REPLAYS}/sweeps", json={**body, "clusters": ["2x4", "4x4"]}, headers=alice
            )
            assert r.status_code == 202, r.text
            sweep = r.json()["id"]
            one = {"trace_id": trace, "policy": "fifo", "cluster": "2x4"}
            assert client.post(REPLAYS, json=one, headers=alice).status_code == 429

            _stop_with_a_task_in_redis(client, worker, own_redis)
            lost = next(r.id for r in _rows(client) if r.status == "queued" and r.dispatched_at)
            own_redis.restart_empty()
            assert own_redis.queued("lost") == 0
            os.kill(worker.pid, signal.SIGCONT)

            # Each replay is sent at most MAX_DISPATCHES times, START_TIMEOUT_S apart.
            bound_s = MAX_DISPATCHES * (START_TIMEOUT_S + RECONCILE_EVERY_S) + 30
            path = f"{REPLAYS}/sweeps/{sweep}"

            def ended() -> bool:
                return bool(client.get(path, headers=alice).json()["status"] != "running")

            wait_for(ended, timeout_s=bound_s, every_s=0.2)
            rows = {r.id: r for r in _rows(client)}
            assert all(r.status == "succeeded" for r in rows.values()), [
                (r.id, r.status, r.error) for r in rows.values()
            ]
            assert rows[lost].dispatches == 2  # lost with Redis, sent again, run once
            assert client.get(path, headers=alice).json()["status"] == "succeeded"

            again = client.post(REPLAYS, json=one, headers=alice)
            assert again.status_code == 202, again.text
            wait_for(lambda: _rows(client)[-1].status == "succeeded", timeout_s=60, every_s=0.2)
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        stop_process(worker)
