"""A DLJob's spec.deadlineSeconds (issue 32): read into JobSpec.deadline_s, absent for a
best-effort job, refused naming the field when malformed (by the CRD schema on the real
API server and by `job_spec`); and the API's manifest of a REST job with a deadline
carries it. Live, under `elasticflow`, with real worker processes: a job that can make
its deadline is admitted and meets it, one no share can finish in time fails at once
as Refused, with a Warning event saying why; an elastic deadline job running on the
whole node is resized to admit and start a second deadline job, and both meet theirs.
The same hopeless job through REST (local mode), a one-job replay and the operator is
refused with the same reason (the Show)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.cluster_mode.manifest import dljob_manifest
from api.schemas.jobs import JobCreate
from gpuflow.cli import main
from operators.dljobs.resources import job_spec
from operators.kube.times import parse_time
from operators.pods.failure_policy import EXIT_CHECKPOINTED
from tests.api.builders import auth, migrated_sqlite, submit, wait_for
from tests.operators.builders import make_dljob
from tests.operators.conftest import GpuCluster
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster


def dljob(name: str, deadline: Any = None) -> dict[str, Any]:
    obj = make_dljob(name, 1)
    obj["metadata"].update({"uid": f"u-{name}", "creationTimestamp": "2027-01-15T08:00:00Z"})
    if deadline is not None:
        obj["spec"]["deadlineSeconds"] = deadline
    return obj


def test_job_spec_reads_the_deadline() -> None:
    spec = job_spec(dljob("a", 3600))
    assert spec.deadline_s == 3600.0
    assert spec.due_s == spec.submit_s + 3600.0
    assert job_spec(dljob("b")).deadline_s is None


@pytest.mark.parametrize("bad", [0, -5, "1h", True, float("inf")])
def test_a_malformed_deadline_names_the_field(bad: Any) -> None:
    with pytest.raises(ValueError) as err:
        job_spec(dljob("a", bad))
    assert str(err.value).startswith("spec.deadlineSeconds: must be a number of seconds > 0")


def test_the_manifest_of_a_rest_job_carries_its_deadline() -> None:
    body = JobCreate(num_gpus=1, duration_s=60.0, deadline_s=900.0)
    job = {
        "num_gpus": 1,
        "min_gpus": 1,
        "max_gpus": 1,
        "tenant": "t",
        "priority": 0,
        "model": "generic",
        "gpu_mem_mib": None,
        "batch_size": None,
        "precision": "tf32",
        "duration_s": 60.0,
        "deadline_s": 900.0,
        "id": "j1",
        "dljob_name": "j1",
        "dljob_namespace": "default",
    }
    assert dljob_manifest(job, body, "img")["spec"]["deadlineSeconds"] == 900.0
    del job["deadline_s"]
    assert "deadlineSeconds" not in dljob_manifest(job, body, "img")["spec"]


def test_the_crd_schema_takes_a_deadline_and_refuses_one_not_above_zero(
    gpu_cluster: GpuCluster,
) -> None:
    created = gpu_cluster.api.create_dljob("default", dljob("due", 3600))
    assert created["spec"]["deadlineSeconds"] == 3600
    with pytest.raises(kubernetes.client.ApiException) as err:
        gpu_cluster.api.create_dljob("default", dljob("late", 0))
    assert err.value.status == 422
    assert "deadlineSeconds" in str(err.value.body)


def test_live_elasticflow_meets_one_deadline_and_refuses_the_other(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    fine = dljob("fine", 600)  # 0.5 s of work, due in 10 minutes
    fine["spec"]["expectedDurationSeconds"] = 1
    hopeless = dljob("hopeless", 5)  # an hour of work on its one GPU, due in 5 s
    hopeless["spec"]["expectedDurationSeconds"] = 3600
    api.create_dljob("default", fine)
    api.create_dljob("default", hopeless)
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy="elasticflow"):
            wait_phases(api, "Failed", ["hopeless"])
            wait_phases(api, "Succeeded", ["fine"])
    finally:
        kubelet.stop()
    status = api.get_dljob("default", "hopeless")["status"]
    assert status["reason"] == "Refused"
    assert status["message"].startswith("no share meets its deadline")
    assert "attempt" not in status or not status["attempt"]  # it never started
    items = api.core.list_namespaced_event("default").items
    refused = [e for e in items if e.involved_object.name == "hopeless" and e.reason == "Refused"]
    assert len(refused) == 1 and refused[0].type == "Warning"
    done = api.get_dljob("default", "fine")
    due_s = parse_time(done["metadata"]["creationTimestamp"]) + 600
    assert parse_time(done["status"]["completionTime"]) <= due_s


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_live_elasticflow_shrinks_an_elastic_job_to_admit_a_deadline_and_meets_both(
    gpu_cluster: RealCluster,
) -> None:
    """ElasticFlow's elastic scaling live (issue 32, item 5): `elastic` (1 to 8 GPUs,
    due in 2 minutes) runs alone on the node's 8 GPUs; `rigid` (4 GPUs, due 30 s after
    it arrives) fits only if `elastic` gives 4 back. The operator admits it, resizes
    `elastic` (checkpoint, restart on fewer GPUs) and starts `rigid`: both finish by
    their deadlines, and `rigid` is never refused."""
    api = gpu_cluster.api
    elastic = dljob("elastic", 120)
    elastic["spec"].update({"gpus": 8, "minGpus": 1, "maxGpus": 8, "expectedDurationSeconds": 4})
    elastic["spec"]["env"][0]["value"] = "4"  # the test kubelet's run time, s
    rigid = dljob("rigid", 30)
    rigid["spec"].update({"gpus": 4, "minGpus": 4, "maxGpus": 4, "expectedDurationSeconds": 2})
    rigid["spec"]["env"][0]["value"] = "2"
    for obj in (elastic, rigid):
        del obj["metadata"]["uid"], obj["metadata"]["creationTimestamp"]
    kubelet = Kubelet(gpu_cluster.client, sigterm_exit=EXIT_CHECKPOINTED).start()
    try:
        with running_operator(gpu_cluster.client, policy="elasticflow", interval_s=0.2):
            api.create_dljob("default", elastic)
            wait_phases(api, "Running", ["elastic"])
            api.create_dljob("default", rigid)
            wait_phases(api, "Succeeded", ["elastic", "rigid"], timeout_s=90)
    finally:
        kubelet.stop()
    events = api.core.list_namespaced_event("default").items
    reasons = {(e.involved_object.name, e.reason) for e in events}
    assert ("elastic", "ResizedByPolicy") in reasons
    assert ("rigid", "Refused") not in reasons
    for name, deadline_s in (("elastic", 120), ("rigid", 30)):
        done = api.get_dljob("default", name)
        due_s = parse_time(done["metadata"]["creationTimestamp"]) + deadline_s
        assert parse_time(done["status"]["completionTime"]) <= due_s, name


# One hopeless job in each backend's terms: an hour of ResNet-50 on its one GPU, due 5 s
# after submission, on DGX-1 V100 nodes (the operator tests' nodes; the preset in REST
# and replay).
HOPELESS_WORK_S, HOPELESS_DUE_S, DGX1 = 3600, 5, "dgx1-v100:2"


def _rest_refusal(tmp_path: Path) -> str:
    settings = migrated_sqlite(tmp_path / "rest", cluster=DGX1, policy="elasticflow")
    with TestClient(create_app(settings)) as client:
        alice = auth(client, "alice", "vision")
        spec = {"num_gpus": 1, "duration_s": HOPELESS_WORK_S, "deadline_s": HOPELESS_DUE_S}
        job = submit(client, alice, **spec)

        def refused() -> str | None:
            body = client.get(f"/api/v1/jobs/{job['id']}", headers=alice).json()
            return body["reason_message"] if body["reason_code"] == "Refused" else None

        message: str = wait_for(refused)
    return message


def _replay_refusal(tmp_path: Path) -> str:
    trace = tmp_path / "hopeless.csv"
    row = f"hopeless,0,1,resnet50,{HOPELESS_WORK_S},{HOPELESS_DUE_S}"
    trace.write_text(f"job_id,submit_s,num_gpus,model,duration_s,deadline_s\n{row}\n")
    out = tmp_path / "replay"
    assert main(["replay", str(trace), "-p", "elasticflow", "-c", DGX1, "--out", str(out)]) == 0
    with (out / "jobs.csv").open() as f:
        (job,) = list(csv.DictReader(f))
    return job["refused"]


def test_a_hopeless_deadline_is_refused_with_one_reason_in_rest_replay_and_the_operator(
    gpu_cluster: RealCluster, tmp_path: Path
) -> None:
    api = gpu_cluster.api
    hopeless = dljob("hopeless", HOPELESS_DUE_S)
    hopeless["spec"]["expectedDurationSeconds"] = HOPELESS_WORK_S
    api.create_dljob("default", hopeless)
    with running_operator(gpu_cluster.client, policy="elasticflow"):
        wait_phases(api, "Failed", ["hopeless"])
    live = api.get_dljob("default", "hopeless")["status"]["message"]
    assert live.startswith("no share meets its deadline 5 s after submission: its ")
    assert live.endswith(" iterations on 1 GPU take 3600 s")
    assert _rest_refusal(tmp_path) == live
    assert _replay_refusal(tmp_path) == live
