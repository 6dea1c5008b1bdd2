"""GET /jobs/{id}: the job's speed on each GPU type it has run on (issue 31, item 4):
local mode's from the simulator, cluster mode's from the DLJob's status.typeThroughput
that the operator records from the job's reports (operators/dljobs/type_throughput.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.settings import Settings
from controller.model import Allocation, JobSpec
from controller.model.type_throughput import TypeThroughput
from controller.rates import RateModel
from controller.spec import load_cluster
from operators.dljobs.type_throughput import status_fields
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import _settings, service
from tests.operators.real_cluster import RealCluster

JOBS = "/api/v1/jobs"
A100 = "A100-SXM4-40GB"
V100 = "V100-SXM2-16GB"


def job_of(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    r = client.get(f"{JOBS}/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_local_mode_shows_the_simulated_speed_on_the_type_a_job_runs_on(
    client: TestClient, pg_settings: Settings
) -> None:
    alice = auth(client, "alice", "vision")
    job = submit(client, alice, num_gpus=2, batch_size=64, duration_s=10_000.0)
    # Its nodes come from the database, which local mode's ticker writes a moment later.
    running = wait_for(
        lambda: (
            (got := job_of(client, alice, job["id"]))["type_throughput"] and got["nodes"] and got
        )
    )
    cluster = load_cluster(pg_settings.cluster)
    (entry,) = running["type_throughput"]
    nodes = {n.name: i for i, n in enumerate(cluster.nodes)}
    (node,) = running["nodes"].split(",")
    gpu_type = cluster.nodes[nodes[node]].gpu_type.name
    spec = JobSpec(job["id"], 0.0, 2, "resnet50", duration_s=10_000.0, batch_size=64)
    alloc = Allocation.whole((nodes[node], g) for g in range(2))
    rate = RateModel(cluster).rate_ips(spec, alloc)
    assert entry["gpu_type"] == gpu_type and entry["source"] == "simulated"
    assert (entry["gpus"], entry["batch_size"]) == (2, 64)
    assert entry["steps_per_s"] == pytest.approx(rate)
    assert entry["samples_per_s"] == pytest.approx(64 * rate)
    # The list leaves it out: only GET /jobs/{id} asks the backend.
    listed = client.get(JOBS, headers=alice).json()["data"]
    assert listed[0]["type_throughput"] is None


def test_cluster_mode_shows_what_the_operator_recorded_in_the_dljob(
    tmp_path: Path, kube_cluster: RealCluster, pg_settings: Settings
) -> None:
    settings = _settings(tmp_path, kube_cluster, database_url=pg_settings.database_url)
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=4, batch_size=32)
        assert job_of(client, alice, job["id"])["type_throughput"] == []
        record = {
            V100: TypeThroughput(V100, 2.5, 4, 32, 1_800_000_000.0),
            A100: TypeThroughput(A100, 6.0, 4, 32, 1_800_000_100.0),
        }
        fields = status_fields(record)
        # The CRD schema holds the shape; a rate that is no rate is left out.
        bad = {**fields["typeThroughput"][0], "gpuType": "T4", "stepsPerSecond": -1.0}
        fields["typeThroughput"].append(bad)
        obj = kube_cluster.api.get_dljob("default", job["dljob_name"])
        obj.setdefault("status", {}).update(fields)
        kube_cluster.api.replace_dljob_status(obj)
        got = wait_for(lambda: job_of(client, alice, job["id"])["type_throughput"])
        assert [(e["gpu_type"], e["steps_per_s"], e["samples_per_s"]) for e in got] == [
            (A100, 6.0, 192.0),
            (V100, 2.5, 80.0),
        ]
        assert {e["source"] for e in got} == {"measured"}
        assert got[0]["measured_s"] == pytest.approx(1_800_000_100.0)
