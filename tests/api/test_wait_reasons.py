"""Local mode keeps a waiting job's reason current (api/local_mode/backend.py's ticker).

A job is recorded at its submission, before the round that gives it a reason; its
row must take the reason when that round comes, and follow it when it changes, not
keep the empty one it was first recorded with.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.api.builders import auth, migrated_sqlite, submit, wait_for

JOBS = "/api/v1/jobs"


@pytest.fixture()
def slow_rounds(tmp_path: Path) -> Iterator[TestClient]:
    """One 4-GPU node, a round every 60 simulated seconds (3 s of wall time): the
    ticker (every 50 ms) records a new job well before the round that decides it."""
    settings = migrated_sqlite(tmp_path, cluster="1x4", time_scale=20.0, round_interval_s=60.0)
    with TestClient(create_app(settings)) as client:
        yield client


def _job(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"{JOBS}/{job_id}", headers=headers).json()
    return body


def test_a_job_recorded_before_its_first_round_gets_its_reason(slow_rounds: TestClient) -> None:
    client = slow_rounds
    alice = auth(client, "alice", "vision")
    first = submit(client, alice, num_gpus=4, duration_s=1e7)["id"]
    second = submit(client, alice, num_gpus=4, duration_s=1e7)["id"]
    # Recorded at once (within 50 ms), up to 3 s before the round that decides it.
    wait_for(lambda: _job(client, alice, first)["status"] == "Running", timeout_s=30)
    waiting = wait_for(
        lambda: (j := _job(client, alice, second))["reason_code"] and j, timeout_s=30
    )
    assert waiting["status"] == "Queued"
    assert waiting["reason_code"] == "InsufficientGpus"
    assert waiting["reason_message"] == "needs 4 GPUs; 0 are free"
