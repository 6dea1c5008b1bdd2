"""A job's measured speed on each GPU type (issue 31, item 4): what its reports say of
the type it runs on is recorded in `status.typeThroughput`, kept across an operator's
restart, and read by the policies over the model's speed (operators/dljobs/type_throughput.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controller.model import Allocation, Cluster, GpuShare, JobSpec, JobStatus, JobView, Measured
from controller.model.type_throughput import TypeThroughput
from controller.rates import RateModel
from operators.dljobs.type_throughput import (
    RECORD_DRIFT,
    START_RESOLUTION_S,
    MeasuredTypeRates,
    merged,
    observed,
    recorded,
    status_fields,
)
from operators.kube import KubeApi
from operators.nodes import build_cluster
from tests.builders import make_view
from tests.operators.builders import dljob_status, make_dljob, make_node_body
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

A100 = "A100-SXM4-40GB"  # controller/presets/dgx-a100.yaml
V100 = "V100-SXM2-16GB"  # the builders' default node, dgx1-v100
BATCH = 64


def two_types() -> tuple[Cluster, RateModel]:
    """node-0 a DGX-1 (V100), node-1 a DGX A100, as the operator builds them."""
    cluster = build_cluster([make_node_body("node-0"), make_node_body("node-1", "dgx-a100")])
    return cluster.cluster, RateModel(cluster.cluster)


def running_on(node: int, gpus: int, measured: Measured, fraction: float = 1.0) -> JobView:
    alloc = Allocation(tuple(GpuShare(node, g, fraction) for g in range(gpus)))
    spec = JobSpec("default/j", 0.0, gpus, "resnet50", batch_size=BATCH, duration_s=600.0)
    view = make_view(spec, status=JobStatus.RUNNING, allocation=alloc)
    return replace(view, measured=measured)


def report(reported_s: float, gpus: int = 4, samples_per_s: float = 640.0) -> Measured:
    return Measured(reported_s, 100, BATCH, gpus, samples_per_s)


def test_a_report_counts_for_the_one_type_the_job_runs_on_whole() -> None:
    cluster, _ = two_types()
    seen = observed(running_on(1, 4, report(10.0)), cluster, running_s=5.0)
    assert seen == TypeThroughput(A100, 10.0, 4, BATCH, 10.0)
    # From before its gang started there (a migration), another size, shared GPUs.
    assert observed(running_on(1, 4, report(5.5)), cluster, 5.0) is None
    assert observed(running_on(1, 4, report(10.0, gpus=2)), cluster, 5.0) is None
    assert observed(running_on(1, 4, report(10.0), 0.5), cluster, 5.0) is None


def test_the_record_changes_only_past_the_drift_and_reads_back() -> None:
    old = {A100: TypeThroughput(A100, 10.0, 4, BATCH, 1.0)}
    near = TypeThroughput(A100, 10.0 * (1 + RECORD_DRIFT / 2), 4, BATCH, 2.0)
    assert merged(old, near) is None
    far = TypeThroughput(A100, 10.0 * (1 + 2 * RECORD_DRIFT), 4, BATCH, 2.0)
    v100 = TypeThroughput(V100, 3.0, 4, BATCH, 3.0)
    new = merged(merged(old, far) or {}, v100)
    assert new == {A100: far, V100: v100}
    status = status_fields(new)
    assert [e["gpuType"] for e in status["typeThroughput"]] == [A100, V100]
    assert recorded(status) == new
    bad = {"typeThroughput": [{"gpuType": V100, "stepsPerSecond": "x"}, {"gpuType": A100}]}
    assert recorded(bad) == {}


def test_policies_see_the_measured_rate_where_the_job_ran_and_the_model_elsewhere() -> None:
    _, rates = two_types()
    spec = JobSpec("default/j", 0.0, 4, "resnet50", batch_size=BATCH, duration_s=600.0)
    model_a100 = rates.type_rate_ips(spec, A100, 4)
    model_v100 = rates.type_rate_ips(spec, V100, 4)
    assert model_a100 and model_v100 and model_a100 > model_v100
    ran = {"default/j": {A100: TypeThroughput(A100, model_v100 / 2, 4, BATCH, 1.0)}}
    seen = MeasuredTypeRates(rates, ran)
    assert seen.type_rate_ips(spec, A100, 4) == model_v100 / 2
    assert seen.type_rate_ips(spec, V100, 4) == model_v100
    # At another size: the model's speed there, by the job's measured ratio to it.
    model_a100_8 = rates.type_rate_ips(spec, A100, 8)
    assert model_a100_8 is not None
    scaled = seen.type_rate_ips(spec, A100, 8)
    assert scaled == pytest.approx(model_a100_8 * (model_v100 / 2) / model_a100)
    other = replace(spec, job_id="default/k")
    assert seen.type_rate_ips(other, A100, 4) == model_a100


def train_report(api: KubeApi, name: str, samples_per_s: float) -> None:
    """Write the job's `status.train` as the API does from gpuflow.train's reports."""
    obj = api.get_dljob("default", name)
    obj["status"]["train"] = {
        "step": 200,
        "reportedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "batchSize": BATCH,
        "gpus": 8,
        "samplesPerSecond": samples_per_s,
        "throughput": [{"gpus": 8, "batchSize": BATCH, "samplesPerSecond": samples_per_s}],
    }
    api.replace_dljob_status(obj)


def nodes_of(api: KubeApi, name: str) -> set[str]:
    return {
        p["spec"].get("nodeName")
        for p in job_pods(api, name)
        if "deletionTimestamp" not in p["metadata"]
    }


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_slow_measured_type_moves_the_job_after_a_restart(gpu_cluster: RealCluster) -> None:
    """gavel-fifo puts the job on the A100s, which the model says run it fastest; the
    job reports a speed there below the model's on the V100s, which the operator
    records; an operator restarted afresh (its Gavel allocation recomputed) reads the
    record and moves the job to the V100s. Blind to the report it would keep it on the
    A100s, where it started."""
    api = gpu_cluster.api
    gpu_cluster.add_node("node-1", rack="r0", node_type="dgx-a100")
    _, rates = two_types()
    spec = JobSpec("default/het", 0.0, 8, "resnet50", batch_size=BATCH, duration_s=600.0)
    model_v100 = rates.type_rate_ips(spec, V100, 8)
    assert model_v100 is not None
    slow_steps = model_v100 / 2  # half the model's V100 speed
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        body = make_dljob("het", 8, duration_s=600.0)
        body["spec"]["batchSize"] = BATCH
        with running_operator(gpu_cluster.client, policy="gavel-fifo") as op:
            api.create_dljob("default", body)
            wait_phases(api, "Running", ["het"])
            wait_for("the pods on the A100s", lambda: nodes_of(api, "het") == {"node-1"}, 20)
            wait_for("the gang running", lambda: dljob_status(api, "het").get("startTime"), 20)
            # A report counts once the start (known to the second) is surely past.
            time.sleep(START_RESOLUTION_S + 0.1)
            train_report(api, "het", slow_steps * BATCH)
            entries = wait_for(
                "the A100 speed recorded",
                lambda: dljob_status(api, "het").get("typeThroughput"),
                20,
            )
            assert [e["gpuType"] for e in entries] == [A100]
            assert entries[0]["stepsPerSecond"] == pytest.approx(slow_steps, rel=1e-5)
            assert (entries[0]["gpus"], entries[0]["batchSize"]) == (8, BATCH)
            snapshot = op.backend.last_snapshot
            assert snapshot is not None and snapshot.type_rates is not None
            seen = snapshot.type_rates.type_rate_ips(spec, A100, 8)
            assert seen == pytest.approx(slow_steps, rel=1e-5)
            assert nodes_of(api, "het") == {"node-1"}  # the running allocation stands
        with running_operator(gpu_cluster.client, policy="gavel-fifo", identity="second") as op:
            wait_for("the job moved to the V100s", lambda: nodes_of(api, "het") == {"node-0"}, 30)
            wait_phases(api, "Running", ["het"])
            status = dljob_status(api, "het")
            assert status.get("restarts", 0) >= 1
            # The A100 report, fresh still, says nothing of the V100s: not in the
            # record, and not the job's speed there (the model's, never measured).
            assert [e["gpuType"] for e in status["typeThroughput"]] == [A100]

            def on_v100s() -> JobView | None:
                snapshot = op.backend.last_snapshot
                job = snapshot.job("default/het") if snapshot else None
                alloc = job.allocation if job else None
                return job if alloc is not None and alloc.nodes == (0,) else None

            job = wait_for("the job's view on the V100s", on_v100s, 20)
            assert job.allocation is not None
            model_here = rates.rate_ips(job.spec, job.allocation, batch_size=BATCH)
            assert job.rate_ips == pytest.approx(model_here)
            assert model_here > 1.5 * slow_steps
            time.sleep(START_RESOLUTION_S + 0.1)
            train_report(api, "het", 3 * slow_steps * BATCH)
            entries = wait_for(
                "the V100 speed recorded beside the A100's",
                lambda: (
                    len(dljob_status(api, "het")["typeThroughput"]) == 2
                    and dljob_status(api, "het")["typeThroughput"]
                ),
                20,
            )
            speeds = {e["gpuType"]: e["stepsPerSecond"] for e in entries}
            assert speeds == pytest.approx({A100: slow_steps, V100: 3 * slow_steps}, rel=1e-5)
    finally:
        kubelet.stop()
