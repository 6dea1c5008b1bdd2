"""The operator against the test API server over HTTP: jobs placed, run and finished."""

from __future__ import annotations

import pytest

from operators import crd
from tests.operators.builders import make_dljob
from tests.operators.conftest import GpuCluster
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet


def test_jobs_are_placed_run_and_succeed(gpu_cluster: GpuCluster) -> None:
    api = gpu_cluster.api
    sizes = {"a": 4, "b": 4, "c": 8, "d": 1, "e": 2, "f": 16}
    for name, gpus in sizes.items():
        api.create_dljob("default", make_dljob(name, gpus, duration_s=0.3))
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client):
            wait_phases(api, "Succeeded", list(sizes))
    finally:
        kubelet.stop()
    f = api.get_dljob("default", "f")
    assert f["status"]["attempt"] == 1
    assert f["status"]["attainedGpuSeconds"] > 0
    assert crd.FINALIZER in f["metadata"]["finalizers"]
    pods = job_pods(api, "f")
    assert len(pods) == 2  # one per node of the 16-GPU allocation
    envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in pods]
    assert sorted(e["RANK"] for e in envs) == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"f-1-0.f.default.svc"}
    uuids = [u for e in envs for u in e["NVIDIA_VISIBLE_DEVICES"].split(",")]
    assert len(set(uuids)) == 16 and all(u.startswith("GPU-") for u in uuids)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "DLJob" and owner["name"] == "f" and owner["controller"]
    svc = api.core.read_namespaced_service("f", "default")
    assert svc.spec.cluster_ip == "None"


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_job_too_big_waits_with_a_reason(gpu_cluster: GpuCluster) -> None:
    api = gpu_cluster.api
    api.create_dljob("default", make_dljob("huge", 16))
    with running_operator(gpu_cluster.client):
        wait_phases(api, "Queued", ["huge"])
    status = api.get_dljob("default", "huge")["status"]
    queued = next(c for c in status["conditions"] if c["type"] == "Queued")
    assert queued["status"] == "True"
    assert queued["reason"] == "InsufficientGpus"
    assert "needs 16 GPUs; 8 are free" in queued["message"]


def test_survives_410_gone_dropped_watches_and_conflicts(gpu_cluster: GpuCluster) -> None:
    api, server = gpu_cluster.api, gpu_cluster.server
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            api.create_dljob("default", make_dljob("first", 8, duration_s=0.2))
            wait_phases(api, "Succeeded", ["first"])
            relists = op.caches.dljobs.relists
            server.fail_next("update", "dljobs/status", 409)  # a status write conflicts
            server.compact()  # every watch's resourceVersion is now too old: 410 Gone
            server.close_watches(abrupt=True)
            for i in range(4):
                api.create_dljob("default", make_dljob(f"after-{i}", 4, duration_s=0.2))
            wait_phases(api, "Succeeded")
            assert op.caches.dljobs.relists > relists
    finally:
        kubelet.stop()


def test_a_new_operator_rebuilds_allocations_from_pods(gpu_cluster: GpuCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs keep running
    try:
        for i in range(4):
            api.create_dljob("default", make_dljob(f"r{i}", 4))
        with running_operator(gpu_cluster.client, identity="first"):
            wait_phases(api, "Running")
        before = {p["metadata"]["name"] for i in range(4) for p in job_pods(api, f"r{i}")}
        api.create_dljob("default", make_dljob("late", 4))
        with running_operator(gpu_cluster.client, identity="second"):
            wait_phases(api, "Queued", ["late"])
            status = api.get_dljob("default", "late")["status"]
            assert status["reason"] == "InsufficientGpus"
        after = {p["metadata"]["name"] for i in range(4) for p in job_pods(api, f"r{i}")}
        assert after == before  # nothing restarted, nothing placed twice
    finally:
        kubelet.stop()
