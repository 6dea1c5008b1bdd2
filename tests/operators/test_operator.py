"""The operator against the real control plane: jobs placed, run and finished."""

from __future__ import annotations

import time

import pytest

from operators import crd
from operators.kube.times import parse_time
from policies.registry import policy_names
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.conftest import GpuCluster
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for


@pytest.mark.parametrize("policy", policy_names())
def test_jobs_are_placed_run_and_succeed(gpu_cluster: RealCluster, policy: str) -> None:
    api = gpu_cluster.api
    sizes = {"a": 4, "b": 4, "c": 8, "d": 1, "e": 2, "f": 16}
    for name, gpus in sizes.items():
        api.create_dljob("default", make_dljob(name, gpus, duration_s=0.3))
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy):
            wait_phases(api, "Succeeded", list(sizes))
    finally:
        kubelet.stop()
    f = api.get_dljob("default", "f")
    attempt = f["status"]["attempt"]
    # FIFO never preempts; the other policies may (Tiresias demotes by service).
    assert attempt == 1 if policy == "fifo" else attempt >= 1
    assert f["status"]["restarts"] == attempt - 1
    assert f["status"]["attainedGpuSeconds"] > 0
    assert crd.FINALIZER in f["metadata"]["finalizers"]
    pods = job_pods(api, "f")
    assert len(pods) == 2  # one per node of the 16-GPU allocation
    envs = [{e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]} for p in pods]
    assert sorted(e["RANK"] for e in envs) == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {f"f-{attempt}-0.f.default.svc"}
    uuids = [u for e in envs for u in e["NVIDIA_VISIBLE_DEVICES"].split(",")]
    assert len(set(uuids)) == 16 and all(u.startswith("GPU-") for u in uuids)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "DLJob" and owner["name"] == "f" and owner["controller"]
    svc = api.core.read_namespaced_service("f", "default")
    assert svc.spec.cluster_ip == "None"


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_job_that_does_not_fit_now_waits_with_a_reason(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs keep running
    try:
        api.create_dljob("default", make_dljob("small", 4))
        with running_operator(gpu_cluster.client):
            wait_phases(api, "Running", ["small"])
            api.create_dljob("default", make_dljob("big", 8))
            wait_phases(api, "Queued", ["big"])
    finally:
        kubelet.stop()
    status = api.get_dljob("default", "big")["status"]
    queued = next(c for c in status["conditions"] if c["type"] == "Queued")
    assert queued["status"] == "True"
    assert queued["reason"] == "InsufficientGpus"
    assert "needs 8 GPUs; 4 are free" in queued["message"]


@pytest.mark.parametrize("policy", policy_names())
def test_a_job_no_node_set_can_hold_is_unschedulable_and_blocks_nobody(
    gpu_cluster: RealCluster, policy: str
) -> None:
    api = gpu_cluster.api
    api.create_dljob("default", make_dljob("huge", 20, duration_s=0.2))
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy):
            wait_phases(api, "Unschedulable", ["huge"])
            # FIFO's head of line is not held by a job that can never run.
            api.create_dljob("default", make_dljob("after", 8, duration_s=0.2))
            wait_phases(api, "Succeeded", ["after"])
            status = api.get_dljob("default", "huge")["status"]
            cond = next(c for c in status["conditions"] if c["type"] == "Unschedulable")
            assert cond["status"] == "True"
            assert cond["message"] == "needs 20 GPUs; the cluster has 16 on 2 node(s)"
            events = api.core.list_namespaced_event("default").items
            assert [e.reason for e in events if e.involved_object.name == "huge"].count(
                "Unschedulable"
            ) == 1
            # The cluster grows: the job queues and runs.
            gpu_cluster.add_node("node-2", rack="r0")  # with its kubelet's heartbeat
            wait_phases(api, "Succeeded", ["huge"])
    finally:
        kubelet.stop()


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_arrival_order_is_first_sight_to_the_microsecond(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", make_dljob("blocker", 8, duration_s=1.5))
            wait_phases(api, "Running", ["blocker"])
            # Created in the same second, 0.3 s apart; by name "a-later" comes first.
            api.create_dljob("default", make_dljob("z-earlier", 8, duration_s=0.2))
            time.sleep(0.3)
            api.create_dljob("default", make_dljob("a-later", 8, duration_s=0.2))
            wait_phases(api, "Succeeded", ["blocker", "z-earlier", "a-later"], timeout_s=30)
    finally:
        kubelet.stop()
    z = api.get_dljob("default", "z-earlier")["status"]
    a = api.get_dljob("default", "a-later")["status"]
    assert parse_time(a["arrivalTime"]) - parse_time(z["arrivalTime"]) >= 0.25
    assert parse_time(z["firstStartTime"]) < parse_time(a["firstStartTime"])


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_tiresias_preempts_the_job_with_more_attained_service(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs keep running
    try:
        with running_operator(gpu_cluster.client, policy="tiresias"):
            api.create_dljob("default", make_dljob("old", 8))
            wait_phases(api, "Running", ["old"])
            # The job has had 10,000 GPU-seconds (past the first queue's 3,250) before
            # this attempt: its service, not its arrival, puts it behind a new job.
            old = api.get_dljob("default", "old")
            old["status"]["attainedGpuSeconds"] = 10000.0
            api.replace_dljob_status(old)
            api.create_dljob("default", make_dljob("new", 8))
            wait_phases(api, "Running", ["new"])
            wait_phases(api, "Preempted", ["old"])
    finally:
        kubelet.stop()
    status = api.get_dljob("default", "old")["status"]
    assert status["reason"] != "Restarting"
    preempted = next(c for c in status["conditions"] if c["type"] == "Preempted")
    assert preempted["reason"] == "PreemptedByPolicy"
    assert "tiresias" in preempted["message"]


def test_survives_410_gone_dropped_watches_and_conflicts(fault_cluster: GpuCluster) -> None:
    api, server = fault_cluster.api, fault_cluster.server
    kubelet = Kubelet(fault_cluster.client).start()
    try:
        with running_operator(fault_cluster.client) as op:
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


def test_a_new_operator_rebuilds_allocations_from_pods(gpu_cluster: RealCluster) -> None:
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


def test_jobs_first_seen_together_arrive_in_creation_order(gpu_cluster: RealCluster) -> None:
    """Created within a second before the operator starts, they are first seen in one
    round: arrival follows creation (the store's revision), not uid or name."""
    api = gpu_cluster.api
    names = [f"j{k}-{'zyxwvu'[k]}" for k in range(6)]
    for name in reversed(names):  # created last to first
        api.create_dljob("default", make_dljob(name, 8, duration_s=600))
    with running_operator(gpu_cluster.client):
        wait_for(
            "every arrival recorded",
            lambda: all(dljob_status(api, n).get("arrivalTime") for n in names),
            30,
        )
    arrivals = {n: parse_time(dljob_status(api, n)["arrivalTime"]) for n in names}
    assert sorted(names, key=arrivals.__getitem__) == list(reversed(names))
