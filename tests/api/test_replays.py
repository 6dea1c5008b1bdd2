"""Replays and sweeps: in-process with no broker, on a real Celery worker with Redis."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from api.store.models import Replay
from tests.api.builders import auth, upload_trace, wait_for
from tests.api.conftest import DEAD_REDIS_URL

REPLAYS = "/api/v1/replays"


def _finished(client: TestClient, headers: dict[str, str], replay_id: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        r: dict[str, Any] = client.get(f"{REPLAYS}/{replay_id}", headers=headers).json()
        return r if r["status"] in ("succeeded", "failed") else None

    result: dict[str, Any] = wait_for(done, timeout_s=60, every_s=0.2)
    return result


def _check_results(client: TestClient, headers: dict[str, str], replay: dict[str, Any]) -> None:
    assert replay["status"] == "succeeded", replay["error"]
    assert replay["progress"] == 1.0
    results = client.get(f"{REPLAYS}/{replay['id']}/results", headers=headers).json()
    assert results["headline"]["jobs"] == 40 and results["summary"]["finished"] == 40
    assert set(replay["plots"]) == {"jct_cdf", "utilization", "queue"}
    png = client.get(f"{REPLAYS}/{replay['id']}/plots/jct_cdf", headers=headers)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert client.get(f"{REPLAYS}/{replay['id']}/plots/nope", headers=headers).status_code == 404


def test_with_no_broker_a_replay_runs_in_process(
    sqlite_client: TestClient, trace_file: Path
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    trace = upload_trace(sqlite_client, alice, trace_file)
    body = {"trace_id": trace["id"], "policy": "srtf", "cluster": "2x4"}
    r = sqlite_client.post(REPLAYS, json=body, headers=alice)
    assert r.status_code == 202, r.text
    _check_results(sqlite_client, alice, _finished(sqlite_client, alice, r.json()["id"]))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"policy": "nope"}, "policy"),
        ({"cluster": "nope"}, "cluster"),
        ({"cluster": "../../etc/passwd"}, "cluster"),
        ({"placement": "x"}, "placement"),
    ],
)
def test_a_bad_replay_is_a_422_naming_the_field(
    sqlite_client: TestClient, trace_file: Path, override: dict[str, str], field: str
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    trace = upload_trace(sqlite_client, alice, trace_file)
    body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4", **override}
    r = sqlite_client.post(REPLAYS, json=body, headers=alice)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field


@pytest.fixture()
def worker_client(
    worker_settings: Settings, celery_worker: subprocess.Popen[str], pg_settings: Settings
) -> Iterator[TestClient]:
    # pg_settings: the same session database, truncated after the test.
    with TestClient(create_app(worker_settings)) as c:
        yield c


@pytest.mark.slow
def test_a_replay_runs_on_a_celery_worker(worker_client: TestClient, trace_file: Path) -> None:
    alice = auth(worker_client, "alice", "vision")
    trace = upload_trace(worker_client, alice, trace_file)
    body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4"}
    r = worker_client.post(REPLAYS, json=body, headers=alice)
    assert r.status_code == 202, r.text
    _check_results(worker_client, alice, _finished(worker_client, alice, r.json()["id"]))


@pytest.mark.slow
def test_a_sweep_fans_out_one_replay_per_combination(
    worker_client: TestClient, trace_file: Path
) -> None:
    alice = auth(worker_client, "alice", "vision")
    trace = upload_trace(worker_client, alice, trace_file)
    body = {"trace_ids": [trace["id"]], "policies": ["fifo", "srtf"], "clusters": ["2x4", "1x8"]}
    r = worker_client.post(f"{REPLAYS}/sweeps", json=body, headers=alice)
    assert r.status_code == 202, r.text
    sweep = r.json()
    assert len(sweep["replays"]) == 4
    path = f"{REPLAYS}/sweeps/{sweep['id']}"
    done = wait_for(
        lambda: (
            (s := worker_client.get(path, headers=alice).json())["status"]
            in ("succeeded", "failed")
            and s
        ),
        timeout_s=90,
        every_s=0.2,
    )
    assert done["status"] == "succeeded" and done["progress"] == 1.0
    combos = {(x["policy"], x["cluster"]) for x in done["replays"]}
    assert combos == {("fifo", "2x4"), ("srtf", "2x4"), ("fifo", "1x8"), ("srtf", "1x8")}


@pytest.mark.parametrize("slot_busy", [False, True])
def test_with_the_broker_down_a_replay_is_503_and_leaves_no_row(
    pg_settings: Settings, trace_file: Path, slot_busy: bool
) -> None:
    """Whether the replay would be sent at once or wait for a busy slot."""
    down = {"broker_url": DEAD_REDIS_URL, "live": False, "replay_concurrency": 1}
    settings = pg_settings.model_copy(update=down)
    with TestClient(create_app(settings)) as client:
        alice = auth(client, "alice", "vision")
        trace = upload_trace(client, alice, trace_file)
        if slot_busy:  # another tenant's replay runs on a worker
            bob = auth(client, "bob", "speech")
            with client.app.state.sessions() as session:  # type: ignore[attr-defined]
                bob_id = client.get("/api/v1/users/me", headers=bob).json()["id"]
                session.add(
                    Replay(
                        tenant="speech",
                        user_id=bob_id,
                        trace_id=trace["id"],
                        policy="fifo",
                        cluster="2x4",
                        placement="consolidated",
                        interval_s=60.0,
                        seed=0,
                        status="running",
                    )
                )
                session.commit()
        body = {"trace_id": trace["id"], "policy": "fifo", "cluster": "2x4"}
        r = client.post(REPLAYS, json=body, headers=alice)
        assert r.status_code == 503 and "broker unavailable" in r.json()["detail"]
        assert r.headers["Retry-After"] == "5"
        sweep = {"trace_ids": [trace["id"]], "policies": ["fifo"], "clusters": ["2x4"]}
        r = client.post(f"{REPLAYS}/sweeps", json=sweep, headers=alice)
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        assert client.get(REPLAYS, headers=alice).json()["count"] == 0
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["Retry-After"] == "5"
