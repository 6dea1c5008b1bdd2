"""Replays are never left "running" or "queued" forever (api.replays.reconcile): the
ones a dead runner left are failed with a reason or queued again as the service
starts, and a shutdown ends a running in-process replay instead of waiting for it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.replays.reconcile import INTERRUPTED_ERROR, ORPHANED_ERROR
from api.replays.run import SHUTDOWN_ERROR
from api.settings import Settings
from api.store.models import Replay, utcnow
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from tests.api.builders import auth, upload_trace, wait_for
from tests.api.conftest import DEAD_REDIS_URL, REDIS_URL
from tests.postgres import RUN_ID

REPLAYS = "/api/v1/replays"
BIG_TRACE_JOBS = 20_000  # a replay of these on 2x4 runs for minutes: still running at exit


def stored(settings: Settings, trace_file: Path, *rows: tuple[str, float]) -> list[int]:
    """A user, a trace and a replay row per (status, seconds since its last heartbeat),
    written through a first app as a dead runner would have left them; their ids."""
    with TestClient(create_app(settings.model_copy(update={"live": False}))) as client:
        alice = auth(client, "alice", "vision")
        trace = upload_trace(client, alice, trace_file)
        user_id = client.get("/api/v1/users/me", headers=alice).json()["id"]
        with client.app.state.sessions() as session:  # type: ignore[attr-defined]
            replays = [
                Replay(
                    tenant="vision",
                    user_id=user_id,
                    trace_id=trace["id"],
                    policy="fifo",
                    cluster="2x4",
                    placement="consolidated",
                    interval_s=60.0,
                    seed=0,
                    status=status,
                    progress=0.5 if status == "running" else 0.0,
                    heartbeat_at=utcnow() - timedelta(seconds=beat_s_ago),
                )
                for status, beat_s_ago in rows
            ]
            session.add_all(replays)
            session.commit()
            return [r.id for r in replays]


def replay(client: TestClient, replay_id: int) -> Any:
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        return session.get(Replay, replay_id)


def test_in_process_a_restart_fails_the_interrupted_replay_and_runs_the_queued(
    sqlite_settings: Settings, trace_file: Path
) -> None:
    running, queued = stored(sqlite_settings, trace_file, ("running", 0.0), ("queued", 0.0))
    with TestClient(create_app(sqlite_settings)) as client:
        interrupted = replay(client, running)
        assert interrupted.status == "failed" and interrupted.error == INTERRUPTED_ERROR
        assert interrupted.finished_at is not None
        done = wait_for(lambda: replay(client, queued).status == "succeeded", timeout_s=120)
        assert done


def test_with_a_broker_a_replay_whose_worker_died_is_failed_and_a_live_one_kept(
    pg_settings: Settings, trace_file: Path
) -> None:
    own_queue = {  # what is sent waits on a queue of this test run's own: no worker
        "broker_url": REDIS_URL,
        "broker_key_prefix": f"gpuflow-reconcile-{RUN_ID}:",
        "celery_queue": f"gpuflow-reconcile-{RUN_ID}",
    }
    settings = pg_settings.model_copy(
        update={**own_queue, "live": False, "replay_stale_after_s": 120.0}
    )
    orphan, alive, queued = stored(
        settings, trace_file, ("running", 600.0), ("running", 1.0), ("queued", 1.0)
    )
    with TestClient(create_app(settings)) as client:
        failed = replay(client, orphan)
        assert failed.status == "failed"
        assert failed.error == ORPHANED_ERROR.format(s=120.0)
        assert replay(client, alive).status == "running"  # its worker still beats
        assert replay(client, queued).status == "queued"  # sent; it waits in the broker
        assert replay(client, queued).dispatched_at is not None
    with redis.Redis.from_url(REDIS_URL) as broker:
        assert broker.delete(f"{own_queue['broker_key_prefix']}{own_queue['celery_queue']}") == 1


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "big.csv"
    write_canonical(path, generate(BIG_TRACE_JOBS, seed=3, cluster_gpus=8, load=0.9))
    return path


@pytest.mark.slow
def test_a_shutdown_ends_a_running_in_process_replay_as_failed(
    sqlite_settings: Settings, big_trace: Path
) -> None:
    with TestClient(create_app(sqlite_settings)) as client:
        alice = auth(client, "alice", "vision")
        trace = upload_trace(client, alice, big_trace)
        body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4"}
        r = client.post(REPLAYS, json=body, headers=alice)
        assert r.status_code == 202, r.text
        replay_id = r.json()["id"]
        wait_for(lambda: replay(client, replay_id).status == "running", timeout_s=60)
    # The lifespan has ended: the replay was stopped, not waited for.
    with TestClient(create_app(sqlite_settings.model_copy(update={"live": False}))) as client:
        stopped = replay(client, replay_id)
        assert stopped.status == "failed" and stopped.error == SHUTDOWN_ERROR


def test_an_api_started_with_the_broker_down_keeps_its_queued_replays_for_later(
    pg_settings: Settings, trace_file: Path
) -> None:
    settings = pg_settings.model_copy(update={"broker_url": DEAD_REDIS_URL, "live": False})
    (queued,) = stored(settings, trace_file, ("queued", 1.0))
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        row = replay(client, queued)
        assert row.status == "queued" and row.dispatched_at is None and row.dispatches == 0
