"""Jobs over REST in local mode: validated specs, scheduling, history, cancel, metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.local_mode.backend import row_spec
from api.local_mode.backend import spec_of as job_spec_of
from api.store.models import Job
from controller.model.precision import Precision
from tests.api.builders import auth, job_spec, submit, wait_for

JOBS = "/api/v1/jobs"


def _job(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    r = client.get(f"{JOBS}/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_submitted_job_is_scheduled_runs_and_finishes(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, duration_s=50.0)  # 0.5 s of wall time at scale 100
    assert job["status"] == "Queued" and job["tenant"] == "vision" and job["metrics_token"]
    done = wait_for(lambda: (j := _job(client, alice, job["id"]))["status"] == "Succeeded" and j)
    assert done["progress"] == pytest.approx(1.0) and done["finish_s"] is not None
    events = client.get(f"{JOBS}/{job['id']}/events", headers=alice).json()
    assert [e["kind"] for e in events["data"]] == ["submitted", "started", "finished"]


def test_a_job_says_its_precision_and_defaults_to_tf32(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    bf16 = submit(client, alice, precision="bf16")
    assert bf16["precision"] == "bf16"
    assert _job(client, alice, bf16["id"])["precision"] == "bf16"
    assert submit(client, alice)["precision"] == "tf32"


def test_local_mode_gives_the_simulator_the_rows_precision() -> None:
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
        "precision": "fp16",
    }
    assert row_spec(row).precision is Precision.FP16
    assert job_spec_of(Job(**row)).precision is Precision.FP16


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"num_gpus": 0}, "num_gpus"),
        ({"num_gpus": 99}, "num_gpus"),  # more than the 2x4 cluster has
        ({"min_gpus": 4}, "min_gpus"),
        ({"max_gpus": 1}, "max_gpus"),
        ({"duration_s": None}, "iterations"),
        ({"duration_s": -1.0, "iterations": 10.0}, "duration_s"),
        ({"name": "bad name!"}, "name"),
        ({"colour": "red"}, "colour"),
        ({"precision": "int8"}, "precision"),
        ({"precision": 16}, "precision"),
    ],
)
def test_a_bad_spec_is_a_422_naming_the_field(
    client: TestClient, override: dict[str, Any], field: str
) -> None:
    alice = auth(client, "alice", "vision")
    r = client.post(JOBS, json=job_spec(**override), headers=alice)
    assert r.status_code == 422
    assert field in {e["loc"][-1] for e in r.json()["detail"]}
    assert client.get(JOBS, headers=alice).json()["count"] == 0


@pytest.mark.parametrize(
    ("literal", "field", "echo", "kind"),
    [
        ("NaN", "duration_s", "nan", "finite_number"),
        ("Infinity", "duration_s", "inf", "finite_number"),
        ("1e400", "num_gpus", "inf", "int_type"),  # a count is a JSON integer, strictly
    ],
)
def test_a_non_finite_number_is_a_422_not_a_500(
    client: TestClient, literal: str, field: str, echo: str, kind: str
) -> None:
    # Python's JSON reader takes NaN and Infinity; the schemas refuse them, and the
    # error must still be valid JSON that names the field.
    alice = auth(client, "alice", "vision")
    spec = job_spec()
    spec.pop(field, None)
    body = json.dumps(spec)[:-1] + f', "{field}": {literal}}}'
    r = client.post(JOBS, content=body, headers={**alice, "content-type": "application/json"})
    assert r.status_code == 422
    errors = {e["loc"][-1]: e for e in r.json()["detail"]}
    assert errors[field]["type"] == kind and errors[field]["input"] == echo
    assert client.get(JOBS, headers=alice).json()["count"] == 0


def test_an_unknown_job_is_404(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    for path in ("0" * 32, "nope", "0" * 32 + "/events", "0" * 32 + "/reason"):
        assert client.get(f"{JOBS}/{path}", headers=alice).status_code == 404
    assert client.post(f"{JOBS}/{'0' * 32}/cancel", headers=alice).status_code == 404


def test_a_waiting_job_says_why_and_can_be_cancelled(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    submit(client, alice, num_gpus=8, duration_s=1e6)  # holds the whole cluster
    waiting = submit(client, alice, num_gpus=2)
    reason = wait_for(
        lambda: (
            (r := client.get(f"{JOBS}/{waiting['id']}/reason", headers=alice).json())["code"] and r
        )
    )
    assert reason["waiting"] and reason["code"] == "InsufficientGpus"
    r = client.post(f"{JOBS}/{waiting['id']}/cancel", headers=alice)
    assert r.status_code == 200 and r.json()["status"] == "Cancelled"
    assert client.post(f"{JOBS}/{waiting['id']}/cancel", headers=alice).status_code == 409
    kinds = [
        e["kind"]
        for e in client.get(f"{JOBS}/{waiting['id']}/events", headers=alice).json()["data"]
    ]
    assert kinds == ["submitted", "cancelled"]


def test_list_filters_and_paginates(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    ids = [submit(client, alice, num_gpus=8, duration_s=1e6)["id"] for _ in range(5)]
    page = client.get(JOBS, params={"skip": 1, "limit": 2}, headers=alice).json()
    assert page["count"] == 5 and len(page["data"]) == 2
    wait_for(lambda: client.get(JOBS, params={"status": "Running"}, headers=alice).json()["count"])
    running = client.get(JOBS, params={"status": "Running"}, headers=alice).json()
    queued = client.get(JOBS, params={"status": "Queued"}, headers=alice).json()
    assert running["count"] == 1 and queued["count"] == 4
    assert {j["id"] for j in running["data"] + queued["data"]} == set(ids)


def test_running_jobs_report_metrics_with_their_own_token(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, duration_s=1e6)
    body = {"metrics": [{"name": "loss", "value": 0.9, "step": 1}, {"name": "loss", "value": 0.5}]}
    path = f"{JOBS}/{job['id']}/metrics"
    r = client.post(path, json=body, headers={"X-Job-Token": job["metrics_token"]})
    assert r.status_code == 201 and r.json()["count"] == 2
    assert client.post(path, json=body, headers={"X-Job-Token": "gf_wrong"}).status_code == 404
    got = client.get(path, headers=alice).json()
    assert [m["value"] for m in got["data"]] == [0.9, 0.5]
