"""Dependencies down: 503 with a message, and nothing acknowledged half-written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.http.errors import RETRY_AFTER_S
from api.settings import Settings
from tests.api.builders import auth, job_spec, statements_failing, submit, wait_for
from tests.api.conftest import DEAD_PG_URL

JOBS = "/api/v1/jobs"
JOB_ID = "0" * 32  # a well-formed id: its token is looked up


def test_with_postgresql_down_requests_are_503(pg_settings: Settings) -> None:
    settings = pg_settings.model_copy(update={"database_url": DEAD_PG_URL, "live": False})
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": "Bearer gf_anything"}
        # The request guard's answers: a user's token, and a job's own on its report.
        r = client.get(JOBS, headers=headers)
        assert r.status_code == 503 and r.json()["detail"].startswith("database unavailable")
        assert r.headers["Retry-After"] == str(RETRY_AFTER_S)
        report = client.post(f"{JOBS}/{JOB_ID}/metrics", json={}, headers={"X-Job-Token": "gfj_x"})
        assert report.status_code == 503 and report.json() == {"detail": "database unavailable"}
        assert report.headers["Retry-After"] == str(RETRY_AFTER_S)
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"].startswith("unavailable")
        assert ready.headers["Retry-After"] == str(RETRY_AFTER_S)
        assert client.get("/healthz").status_code == 200


def test_a_database_error_during_submit_is_503_and_leaves_no_job(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    engine = client.app.state.engine  # type: ignore[attr-defined]

    with statements_failing(engine, "INSERT INTO job_events"):
        r = client.post(JOBS, json=job_spec(), headers=alice)
    assert r.status_code == 503 and "database unavailable" in r.json()["detail"]
    assert r.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert client.get(JOBS, headers=alice).json()["count"] == 0
    assert client.app.state.local.live.jobs() == []  # type: ignore[attr-defined]


@pytest.mark.slow
def test_acknowledged_jobs_survive_a_restart(pg_settings: Settings) -> None:
    slow = pg_settings.model_copy(update={"time_scale": 1.0})
    with TestClient(create_app(slow)) as client:
        alice = auth(client, "alice", "vision")
        job = client.post(JOBS, json=job_spec(duration_s=5.0), headers=alice).json()
    fast = pg_settings.model_copy(update={"time_scale": 1000.0})
    with TestClient(create_app(fast)) as client:
        wait_for(
            lambda: client.get(f"{JOBS}/{job['id']}", headers=alice).json()["status"] == "Succeeded"
        )
        kinds = [
            e["kind"]
            for e in client.get(f"{JOBS}/{job['id']}/events", headers=alice).json()["data"]
        ]
        # Submitted, resubmitted by the new process, then run to the end.
        assert kinds.count("submitted") == 2 and kinds[-2:] == ["started", "finished"]


def test_a_cancel_whose_commit_fails_leaves_the_job_as_it_was_and_can_be_retried(
    client: TestClient,
) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, duration_s=1e6)
    live = client.app.state.local.live  # type: ignore[attr-defined]
    engine = client.app.state.engine  # type: ignore[attr-defined]

    with statements_failing(engine, "INSERT INTO job_events", containing="cancelled"):
        r = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
    assert r.status_code == 503 and r.json()["detail"] == "database unavailable"
    # Not cancelled anywhere: the scheduler still has it, the database says so too.
    assert live.job(job["id"]).status.value in ("Queued", "Running")
    assert client.get(f"{JOBS}/{job['id']}", headers=alice).json()["status"] != "Cancelled"
    retry = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
    assert retry.status_code == 200 and retry.json()["status"] == "Cancelled"
    assert live.job(job["id"]).status.value == "Cancelled"
    kinds = [
        e["kind"] for e in client.get(f"{JOBS}/{job['id']}/events", headers=alice).json()["data"]
    ]
    assert kinds.count("cancelled") == 1


# The API as its own process (uvicorn), so that it can be killed (SIGKILL) mid-load.
SERVE_APP = (
    "import sys, uvicorn; from api.app import create_app; "
    "uvicorn.run(create_app(), host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')"
)
KILL_AFTER_ACKS = 10  # cancels answered before the API is killed; the rest race the kill


@contextmanager
def api_process(settings: Settings) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The API on a free port, configured by GPUFLOW_* from `settings`; its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    for key, value in settings.model_dump().items():
        if value is not None:
            env[f"GPUFLOW_{key.upper()}"] = str(value)
    cmd = [sys.executable, "-c", SERVE_APP, str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, timeout_s=60, every_s=0.2)
        yield url, proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_every_acknowledged_cancel_survives_a_kill_of_the_api(pg_settings: Settings) -> None:
    settings = pg_settings.model_copy(update={"time_scale": 1.0, "cluster": "1x4"})
    setup = create_app(settings.model_copy(update={"live": False}))
    alice = auth(setup, "alice", "vision")
    setup.state.engine.dispose()
    acked: list[str] = []
    with api_process(settings) as (url, proc), httpx.Client(base_url=url, timeout=60) as http:
        ids = []
        for _ in range(40):  # one runs (4 GPUs each on a 4-GPU node), the others wait
            r = http.post(JOBS, json=job_spec(num_gpus=4, duration_s=1e6), headers=alice)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])

        def cancel(job_id: str) -> tuple[str, int]:
            try:
                return job_id, http.post(f"{JOBS}/{job_id}/cancel", headers=alice).status_code
            except httpx.TransportError:
                return job_id, 0  # the API was killed before it answered

        with ThreadPoolExecutor(4) as pool:
            for done in as_completed([pool.submit(cancel, i) for i in ids]):
                job_id, code = done.result()
                assert code in (0, 200), code
                if code == 200:
                    acked.append(job_id)
                if len(acked) == KILL_AFTER_ACKS:
                    proc.kill()
    assert len(acked) >= KILL_AFTER_ACKS
    with api_process(settings) as (url, _), httpx.Client(base_url=url, timeout=60) as http:
        listed = http.get(JOBS, headers=alice, params={"limit": 1000}).json()
        assert listed["count"] == len(ids)  # no job lost, none duplicated
        uncancelled = [j["id"] for j in listed["data"] if j["status"] != "Cancelled"]
        assert uncancelled  # the kill came before every cancel was answered

        def kinds(job_id: str) -> list[str]:
            events = http.get(f"{JOBS}/{job_id}/events", headers=alice).json()["data"]
            return [e["kind"] for e in events]

        # The new process resubmitted the unfinished jobs (and so read the database).
        wait_for(lambda: kinds(uncancelled[0]).count("submitted") == 2, timeout_s=60)
        for job_id in ids:
            job = http.get(f"{JOBS}/{job_id}", headers=alice).json()
            history = kinds(job_id)
            if job_id in acked:
                assert job["status"] == "Cancelled", (job_id, history)
            if job["status"] == "Cancelled":
                # Cancelled once, and never run or resubmitted after that.
                assert history.count("cancelled") == 1 and history[-1] == "cancelled", history
            else:
                assert "cancelled" not in history
