"""A job's deadline through REST (issue 32): given as a UTC time or in seconds after
submission, refused with a 422 naming the field when malformed, and, under the
`elasticflow` policy, a job no share can finish in time is refused by the scheduler
and says why in its status, while one that can make it runs and meets it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.local_mode.backend import row_spec
from api.routes.whatif import GATE as WHATIF_GATE
from api.settings import Settings
from tests.api.builders import auth, job_spec, submit, wait_for

JOBS = "/api/v1/jobs"


@pytest.fixture()
def elastic_client(pg_settings: Settings) -> Iterator[TestClient]:
    settings = pg_settings.model_copy(update={"policy": "elasticflow"})
    with TestClient(create_app(settings)) as c:
        yield c


def _job(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    r = client.get(f"{JOBS}/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_deadline_in_seconds_or_as_a_utc_time_is_kept_in_seconds(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    assert submit(client, alice, deadline_s=600.0)["deadline_s"] == 600.0
    due = datetime.now(UTC) + timedelta(hours=1)
    job = submit(client, alice, deadline=due.isoformat())
    assert job["deadline_s"] == pytest.approx(3600.0, abs=30.0)
    assert _job(client, alice, job["id"])["deadline_s"] == pytest.approx(3600.0, abs=30.0)
    assert submit(client, alice)["deadline_s"] is None  # best-effort


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"deadline_s": 0}, "deadline_s"),
        ({"deadline_s": -5.0}, "deadline_s"),
        ({"deadline_s": "soon"}, "deadline_s"),
        ({"deadline": "2030-01-01T00:00:00"}, "deadline"),  # no zone
        ({"deadline": "tomorrow"}, "deadline"),
        ({"deadline": "2001-01-01T00:00:00Z"}, "deadline"),  # in the past
        ({"deadline": "9999-01-01T00:00:00Z"}, "deadline"),  # further than deadline_s may be
        ({"deadline_s": 2e9}, "deadline_s"),
    ],
)
def test_a_bad_deadline_is_a_422_naming_the_field(
    client: TestClient, override: dict[str, Any], field: str
) -> None:
    alice = auth(client, "alice", "vision")
    r = client.post(JOBS, json=job_spec(**override), headers=alice)
    assert r.status_code == 422, r.text
    assert field in {e["loc"][-1] for e in r.json()["detail"]}
    assert client.get(JOBS, headers=alice).json()["count"] == 0


def test_both_deadline_forms_at_once_are_a_422(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    due = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = client.post(JOBS, json=job_spec(deadline=due, deadline_s=60.0), headers=alice)
    assert r.status_code == 422, r.text
    assert "deadline_s" in r.text
    assert client.get(JOBS, headers=alice).json()["count"] == 0


def test_local_mode_gives_the_simulator_the_rows_deadline() -> None:
    row = {
        "id": "j",
        "num_gpus": 1,
        "model": "resnet50",
        "duration_s": 10.0,
        "iterations": None,
        "min_gpus": 1,
        "max_gpus": 1,
        "batch_size": None,
        "gpu_mem_mib": None,
        "tenant": "t",
        "user_id": 1,
        "priority": 0,
        "precision": "tf32",
        "deadline_s": 42.0,
    }
    assert row_spec(row).deadline_s == 42.0


def test_elasticflow_refuses_a_job_no_share_can_finish_and_runs_one_that_can(
    elastic_client: TestClient,
) -> None:
    client = elastic_client
    alice = auth(client, "alice", "vision")
    # 100 s of work on its 2 GPUs (it is not elastic): due in 1 s, no share meets it.
    hopeless = submit(client, alice, duration_s=100.0, deadline_s=1.0)
    feasible = submit(client, alice, duration_s=50.0, deadline_s=5000.0)
    refused = wait_for(
        lambda: (j := _job(client, alice, hopeless["id"]))["status"] == "Cancelled" and j
    )
    assert refused["reason_code"] == "Refused"
    assert "no share meets its deadline" in refused["reason_message"]
    assert refused["first_start_s"] is None
    done = wait_for(
        lambda: (j := _job(client, alice, feasible["id"]))["status"] == "Succeeded" and j
    )
    assert done["finish_s"] - done["submit_s"] <= 5000.0


def test_a_job_carries_its_deadline_beside_the_what_if_predicted_finish(
    client: TestClient,
) -> None:
    alice = auth(client, "alice", "vision")
    # FIFO on 2x4: `first` runs alone on the 8 GPUs for 1e4 s; `late` waits for it.
    first = submit(client, alice, num_gpus=8, duration_s=1e4, deadline_s=2e4)
    wait_for(lambda: _job(client, alice, first["id"])["status"] == "Running")
    late = submit(client, alice, num_gpus=8, duration_s=1e3, deadline_s=5e3)
    best_effort = submit(client, alice, num_gpus=8, duration_s=1e3)
    on_time = _job(client, alice, first["id"])
    assert on_time["on_track"] is True
    assert 0 < on_time["predicted_finish_s"] <= 1e4 + 60  # its own run, begun at once
    submitted = datetime.fromisoformat(on_time["created_at"])
    assert datetime.fromisoformat(on_time["deadline"]) == submitted + timedelta(seconds=2e4)
    finish = datetime.fromisoformat(on_time["predicted_finish"])
    assert finish == submitted + timedelta(seconds=on_time["predicted_finish_s"])
    # Once the scheduler holds it (a sync away), the forecast takes it in.
    behind = wait_for(lambda: (j := _job(client, alice, late["id"]))["on_track"] is not None and j)
    assert behind["on_track"] is False
    assert behind["predicted_finish_s"] > 1e4  # after `first`, past its 5e3 s
    plain = _job(client, alice, best_effort["id"])
    assert plain["deadline"] is None and plain["predicted_finish_s"] is None
    assert plain["on_track"] is None
    # The list stays cheap: no forecast there.
    listed = client.get(JOBS, headers=alice).json()["data"]
    assert all(j["predicted_finish_s"] is None for j in listed)


def test_while_a_what_if_runs_a_deadline_job_has_no_prediction_and_no_wait(
    client: TestClient,
) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, num_gpus=8, duration_s=1e4, deadline_s=2e4)
    # Running, as the list says (it forecasts nothing, so nothing is kept for later).
    wait_for(lambda: client.get(JOBS, headers=alice).json()["data"][0]["status"] == "Running")
    with WHATIF_GATE:  # as POST /whatif holds it
        body = _job(client, alice, job["id"])
    assert body["deadline_s"] == 2e4 and body["deadline"] is not None
    assert body["predicted_finish_s"] is None and body["on_track"] is None
    assert _job(client, alice, job["id"])["on_track"] is True  # the gate free again
