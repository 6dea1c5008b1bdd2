"""Dependencies down: 503 with a message, and nothing acknowledged half-written."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth, job_spec
from tests.api.conftest import DEAD_PG_URL

JOBS = "/api/v1/jobs"


def test_with_postgresql_down_requests_are_503(pg_settings: Settings) -> None:
    settings = pg_settings.model_copy(update={"database_url": DEAD_PG_URL, "live": False})
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": "Bearer gf_anything"}
        r = client.get(JOBS, headers=headers)
        assert r.status_code == 503 and r.json()["detail"].startswith("database unavailable")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"].startswith("unavailable")
        assert client.get("/healthz").status_code == 200


def test_a_database_error_during_submit_is_503_and_leaves_no_job(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    engine = client.app.state.engine  # type: ignore[attr-defined]

    def fail_on_events(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO job_events"):
            raise OperationalError(statement, None, Exception("connection lost"))

    event.listen(engine, "before_cursor_execute", fail_on_events)
    try:
        r = client.post(JOBS, json=job_spec(), headers=alice)
    finally:
        event.remove(engine, "before_cursor_execute", fail_on_events)
    assert r.status_code == 503 and "database unavailable" in r.json()["detail"]
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
        from tests.api.builders import wait_for

        wait_for(
            lambda: client.get(f"{JOBS}/{job['id']}", headers=alice).json()["status"] == "Succeeded"
        )
        kinds = [
            e["kind"]
            for e in client.get(f"{JOBS}/{job['id']}/events", headers=alice).json()["data"]
        ]
        # Submitted, resubmitted by the new process, then run to the end.
        assert kinds.count("submitted") == 2 and kinds[-2:] == ["started", "finished"]
