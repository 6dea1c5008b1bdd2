"""Failure semantics of the operator, as batch/v1 Jobs have them: the operator live.

The operator against the strict API test server with the simulated kubelet: a
failure counted once and restarted after the back-off, backoffLimit, FailJob and
Ignore rules, a checkpoint exit after a preemption, pods that never start, node loss;
the failure, back-off limit, start timeout and node loss under every registered
policy. Back-offs and timeouts are shortened to stay fast. The pure pieces (the
back-off schedule, the rules, classify) are tests/operators/test_failure_policy.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from operators.crd import RESOURCE_GPU
from operators.kube.times import parse_time
from operators.pods.failure_policy import EXIT_CHECKPOINTED, RestartPolicy
from policies.registry import policy_names
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

# -- the operator against the control plane ---------------------------------------------

FAST = RestartPolicy(base_s=1.0, cap_s=4.0)


def events(cluster: RealCluster, job: str, reason: str) -> list[Any]:
    items = cluster.api.core.list_namespaced_event("default").items
    return [e for e in items if e.involved_object.name == job and e.reason == reason]


def running_pod(cluster: RealCluster, name: str) -> bool:
    pod = cluster.api.core.read_namespaced_pod(name, "default")
    return bool(pod.status.phase == "Running" and not pod.metadata.deletion_timestamp)


def fail_when_running(cluster: RealCluster, kubelet: Kubelet, pod: str, code: int) -> None:
    wait_for(f"{pod} running", lambda: _exists(cluster, pod) and running_pod(cluster, pod))
    kubelet.fail("default", pod, code)


def _exists(cluster: RealCluster, pod: str) -> bool:
    return any(p["metadata"]["name"] == pod for p in job_pods(cluster.api, pod.split("-")[0]))


def env_of(pod: Any) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("policy", policy_names())
def test_a_worker_failing_once_restarts_once_after_the_backoff(
    gpu_cluster: RealCluster, policy: str
) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy) as op:
            op.backend.lifecycle.restart = FAST
            api.create_dljob("default", make_dljob("w", 16, duration_s=2.0))
            fail_when_running(gpu_cluster, kubelet, "w-1-1", 1)
            status = wait_for(
                "a back-off",
                lambda: dljob_status(api, "w").get("restartAfter") and dljob_status(api, "w"),
            )
            restart_after = parse_time(status["restartAfter"])
            queued = next(c for c in status["conditions"] if c["type"] == "Queued")
            assert queued["reason"] == "BackOff" and status["restartAfter"] in queued["message"]
            assert status["phase"] == "BackOff"  # a failure's back-off, not a preemption
            backoff = next(c for c in status["conditions"] if c["type"] == "BackOff")
            assert backoff["reason"] == "WorkerFailed"
            assert backoff["message"].endswith(
                "restarts from its newest checkpoint (from the beginning if it wrote none)"
            )
            wait_phases(api, "Succeeded", ["w"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "w")
    assert (status["attempt"], status["failures"], status["failedAttempt"]) == (2, 1, 1)
    assert "restartAfter" not in status
    assert len(events(gpu_cluster, "w", "WorkerFailed")) == 1
    (restarted,) = [e for e in events(gpu_cluster, "w", "Scheduled") if "attempt 2" in e.message]
    assert restarted.event_time.timestamp() >= restart_after  # not before the back-off
    pods = {p["metadata"]["name"]: p for p in job_pods(api, "w")}
    assert pods["w-1-1"]["status"]["phase"] == "Failed"  # kept, for its logs
    assert "w-1-0" not in pods  # torn down
    for name in ("w-2-0", "w-2-1"):
        env = env_of(pods[name])
        assert (env["GPUFLOW_RESUME"], env["GPUFLOW_ATTEMPT"]) == ("1", "2")
        assert env["GPUFLOW_CHECKPOINT_PATH"] == "/ckpt/w"


@pytest.mark.parametrize("policy", policy_names())
def test_repeated_failures_fail_the_job_past_backoff_limit(
    gpu_cluster: RealCluster, policy: str
) -> None:
    api = gpu_cluster.api
    job = make_dljob("r", 8, duration_s=30.0)
    job["spec"]["backoffLimit"] = 1
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy) as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=0.2, cap_s=0.2)
            api.create_dljob("default", job)
            fail_when_running(gpu_cluster, kubelet, "r-1-0", 1)
            fail_when_running(gpu_cluster, kubelet, "r-2-0", 2)
            wait_phases(api, "Failed", ["r"])
            time.sleep(1.0)  # rounds go on: nothing more may happen to the job
    finally:
        kubelet.stop()
    status = dljob_status(api, "r")
    assert (status["reason"], status["failures"], status["attempt"]) == (
        "BackoffLimitExceeded",
        2,
        2,
    )
    assert len(events(gpu_cluster, "r", "WorkerFailed")) == 1
    assert len(events(gpu_cluster, "r", "BackoffLimitExceeded")) == 1
    assert "exit code 2" in status["message"]
    assert sorted(p["metadata"]["name"] for p in job_pods(api, "r")) == ["r-1-0", "r-2-0"]


def _with_rules(job: Any, action: str, codes: list[int]) -> Any:
    rule = {"action": action, "onExitCodes": {"operator": "In", "values": codes}}
    job["spec"]["podFailurePolicy"] = {"rules": [rule]}
    return job


def test_a_fail_job_rule_fails_the_job_at_once(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob(
                "default", _with_rules(make_dljob("f", 8, duration_s=30), "FailJob", [42])
            )
            fail_when_running(gpu_cluster, kubelet, "f-1-0", 42)
            wait_phases(api, "Failed", ["f"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "f")
    assert status["reason"] == "PodFailurePolicy"
    assert "f-1-0" in status["message"] and "exit code 42" in status["message"]
    assert not status.get("failures") and status["attempt"] == 1


def test_an_ignore_rule_restarts_at_once_without_counting(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=600.0)  # a back-off would hang
            api.create_dljob(
                "default", _with_rules(make_dljob("i", 8, duration_s=1), "Ignore", [3])
            )
            fail_when_running(gpu_cluster, kubelet, "i-1-0", 3)
            wait_phases(api, "Succeeded", ["i"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "i")
    assert status["attempt"] == 2 and not status.get("failures")
    assert len(events(gpu_cluster, "i", "WorkerFailureIgnored")) == 1


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_checkpoint_exit_after_a_preemption_is_not_counted(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    long = make_dljob("long", 8, duration_s=1.5)
    long["spec"]["expectedDurationSeconds"] = 1000
    short = make_dljob("short", 8, duration_s=0.3)
    short["spec"]["expectedDurationSeconds"] = 1
    kubelet = Kubelet(gpu_cluster.client, sigterm_s=0.3, sigterm_exit=EXIT_CHECKPOINTED).start()
    try:
        with running_operator(gpu_cluster.client, policy="srtf") as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=600.0)
            api.create_dljob("default", long)
            wait_phases(api, "Running", ["long"])
            api.create_dljob("default", short)  # SRTF preempts the long job for it
            wait_phases(api, "Succeeded", ["short", "long"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "long")
    assert status["attempt"] == 2 and not status.get("failures")
    assert events(gpu_cluster, "long", "PreemptedByPolicy")
    # Preempted by the policy: never in a failure's back-off.
    kinds = {c["type"] for c in status["conditions"]}
    assert "Preempted" in kinds and "BackOff" not in kinds
    for reason in ("WorkerFailed", "WorkerCheckpointed", "GangBroken"):
        assert not events(gpu_cluster, "long", reason)


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_crash_without_a_checkpoint_backs_off_to_restart_from_the_beginning(
    gpu_cluster: RealCluster,
) -> None:
    """Issue 25: a killed worker (exit 137) of a job with no checkpoint showed phase
    Preempted and "restarts from its checkpoint"."""
    api = gpu_cluster.api
    job = make_dljob("k", 8, duration_s=1.0)
    del job["spec"]["checkpoint"]
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=2.0, cap_s=2.0)
            api.create_dljob("default", job)
            fail_when_running(gpu_cluster, kubelet, "k-1-0", 137)
            status = wait_for(
                "the back-off",
                lambda: (s := dljob_status(api, "k")).get("phase") == "BackOff" and s,
            )
            assert status["reason"] == "BackOff" and status["restartAfter"] in status["message"]
            wait_phases(api, "Succeeded", ["k"])
    finally:
        kubelet.stop()
    (failed,) = events(gpu_cluster, "k", "WorkerFailed")
    assert failed.message == (
        "pod k-1-0 failed with exit code 137: failure 1 (backoffLimit 3); "
        "restarts from the beginning (no spec.checkpoint.path)"
    )
    status = dljob_status(api, "k")
    assert (status["attempt"], status["failures"]) == (2, 1)
    kinds = {c["type"]: c for c in status["conditions"]}
    assert kinds["BackOff"]["status"] == "False" and "Preempted" not in kinds
    env = env_of(next(p for p in job_pods(api, "k") if p["metadata"]["name"] == "k-2-0"))
    assert "GPUFLOW_CHECKPOINT_PATH" not in env and env["GPUFLOW_ATTEMPT"] == "2"


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_checkpoint_exit_on_its_own_restarts_without_counting(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=600.0)
            api.create_dljob("default", make_dljob("c", 8, duration_s=1))
            fail_when_running(gpu_cluster, kubelet, "c-1-0", EXIT_CHECKPOINTED)
            wait_phases(api, "Succeeded", ["c"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "c")
    assert status["attempt"] == 2 and not status.get("failures")
    assert len(events(gpu_cluster, "c", "WorkerCheckpointed")) == 1


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_pods_that_never_start_free_their_gpus(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    stuck = make_dljob("stuck", 8, duration_s=1)
    # Time for the kubelet to report the pull failure on a loaded machine first.
    stuck["spec"]["startTimeoutSeconds"] = 3
    kubelet = Kubelet(gpu_cluster.client, never_start={"stuck"}).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", stuck)
            wait_phases(api, "Admitted", ["stuck"])
            # Higher priority: FIFO gives it the GPUs once they are free.
            api.create_dljob("default", make_dljob("next", 8, duration_s=0.3, priority=1))
            wait_phases(api, "Succeeded", ["next"])
    finally:
        kubelet.stop()
    (timeout, *_) = events(gpu_cluster, "stuck", "StartTimeout")
    assert "stuck-1-0 (ImagePullBackOff)" in timeout.message
    status = dljob_status(api, "stuck")
    assert not status.get("failures") and status["phase"] != "Failed"


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_under_every_policy_pods_that_never_start_are_torn_down_and_requeued(
    gpu_cluster: RealCluster, policy: str
) -> None:
    api = gpu_cluster.api
    stuck = make_dljob("stuck", 8, duration_s=1)
    # Time for the kubelet to report the pull failure on a loaded machine first.
    stuck["spec"]["startTimeoutSeconds"] = 3
    kubelet = Kubelet(gpu_cluster.client, never_start={"stuck"}).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy):
            api.create_dljob("default", stuck)
            wait_for("a start timeout", lambda: events(gpu_cluster, "stuck", "StartTimeout"))
            # Its pods are deleted (their GPUs free) and the job waits for another attempt.
            wait_for(
                "attempt 1's pods gone",
                lambda: not [p for p in job_pods(api, "stuck") if "-1-" in p["metadata"]["name"]],
            )
    finally:
        kubelet.stop()
    status = dljob_status(api, "stuck")
    assert not status.get("failures") and status["phase"] != "Failed"
    assert "restartAfter" not in status  # a start timeout is not a counted failure


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("gpu_cluster", [3], indirect=True)
def test_node_loss_reschedules_without_counting(gpu_cluster: RealCluster, policy: str) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, policy=policy) as op:
            op.backend.lifecycle.restart = RestartPolicy(base_s=600.0)  # a back-off would hang
            api.create_dljob("default", make_dljob("n", 16, duration_s=30))
            wait_phases(api, "Running", ["n"])
            lost = api.core.read_namespaced_pod("n-1-1", "default").spec.node_name
            api.core.delete_node(lost)
            wait_for("attempt 2", lambda: dljob_status(api, "n").get("attempt") == 2)
            wait_phases(api, "Running", ["n"])
    finally:
        kubelet.stop()
    status = dljob_status(api, "n")
    assert not status.get("failures") and "restartAfter" not in status
    assert lost not in status["nodes"]
    assert len(events(gpu_cluster, "n", "NodeLost")) == 1
    assert not events(gpu_cluster, "n", "WorkerFailed")


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_worker_that_cannot_be_configured_fails_the_job_past_its_backoff_limit(
    gpu_cluster: RealCluster,
) -> None:
    """CreateContainerConfigError (a Secret the pod names is missing) is a failed
    attempt, not a start timeout: retried after the back-off, then Failed with the
    kubelet's reason and message (issue 25: such a job held its GPUs and was requeued
    every 300 s for ever)."""
    api = gpu_cluster.api
    broken = make_dljob("broken", 2, duration_s=1)
    broken["spec"]["backoffLimit"] = 1
    kubelet = Kubelet(gpu_cluster.client, config_error={"broken"}).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            op.backend.lifecycle.config_error_s = 0.5
            op.backend.lifecycle.restart = RestartPolicy(base_s=0.2)
            api.create_dljob("default", broken)
            wait_phases(api, "Failed", ["broken"], timeout_s=30)
    finally:
        kubelet.stop()
    status = dljob_status(api, "broken")
    assert status["reason"] == "CreateContainerConfigError"
    assert 'secret "broken-token" not found' in status["message"]
    assert status["failures"] == 2 and status["attempt"] == 2
    (first, *_) = events(gpu_cluster, "broken", "WorkerFailed")
    assert "failure 1 (backoffLimit 1); tried again after the back-off" in first.message


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_pod_the_kubelet_rejects_for_gpus_taken_outside_gpuflow_counts_as_a_failure(
    gpu_cluster: RealCluster,
) -> None:
    # A pod the default scheduler and the device plugin gave 6 of node-0's 8 GPUs, which
    # gpuflow does not see: its 4-GPU pod is refused by the kubelet, never run beside.
    api = gpu_cluster.api
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "elsewhere", "namespace": "default"},
        "spec": {
            "nodeName": "node-0",
            "containers": [
                {"name": "worker", "image": "cuda", "resources": {"limits": {RESOURCE_GPU: "6"}}}
            ],
        },
    }
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()
    try:
        api.create_pod("default", foreign)
        wait_for("the foreign pod running", lambda: running_pod(gpu_cluster, "elsewhere"))
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", make_dljob("j", 4))
            pod = wait_for("pod j-1-0 rejected", lambda: _failed_pod(gpu_cluster, "j-1-0"))
            failed = wait_for(
                "the job's WorkerFailed condition",
                lambda: _with_reason(dljob_status(api, "j"), "WorkerFailed"),
            )
    finally:
        kubelet.stop()
    assert pod["status"]["reason"] == "OutOfnvidia.com/gpu"
    assert pod["status"]["message"].endswith("requested: 4, used: 6, capacity: 8")
    assert not pod["status"].get("containerStatuses")  # never run
    assert failed["message"].startswith("pod j-1-0 failed with no exit code (OutOfnvidia.com/gpu)")


def _failed_pod(cluster: RealCluster, name: str) -> dict[str, Any] | None:
    pods = job_pods(cluster.api, name.split("-")[0])
    pod = next((p for p in pods if p["metadata"]["name"] == name), None)
    return pod if pod is not None and pod.get("status", {}).get("phase") == "Failed" else None


def _with_reason(status: dict[str, Any], reason: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("reason") == reason), None)
