"""DLJobs as real jobs: the template's checks, CPU requests against nodes' allocatable
on the real control plane, and an invalid spec reported, then fixed."""

from __future__ import annotations

import json
import time
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest

from operators import crd
from operators.dljobs.resources import job_spec
from operators.kube import KubeApi
from tests.operators.builders import dljob_status, make_dljob, make_node_body
from tests.operators.conftest import GpuCluster
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

WORKER = {"name": "worker", "image": "busybox"}


def _with(**spec: Any) -> dict[str, Any]:
    job = make_dljob("j", 4)
    for key in ("image", "command", "env"):
        job["spec"].pop(key)
    job["spec"].update(spec)
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return job


def _template(**pod: Any) -> dict[str, Any]:
    return {"spec": {"containers": [WORKER], **pod}}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, "spec.image: one of spec.image and spec.template is required"),
        (
            {"image": "busybox", "template": _template()},
            "spec.template: give exactly one of spec.template and spec.image",
        ),
        ({"template": _template(), "command": ["x"]}, "spec.command: only with spec.image"),
        ({"template": {"metadata": {}}}, "spec.template.spec: required"),
        ({"template": _template(containers=[])}, "spec.template.spec.containers: at least one"),
        (
            {"template": _template(containers=[WORKER, {"name": "side"}])},
            "spec.template.spec.containers[1].image: required",
        ),
        (
            {"template": _template(containers=[WORKER, WORKER])},
            "spec.template.spec.containers[1].name: duplicate container name 'worker'",
        ),
        (
            {"template": _template(initContainers=[{"image": "x"}])},
            "spec.template.spec.initContainers[0].name: required",
        ),
        (
            {
                "template": _template(
                    containers=[{**WORKER, "resources": {"requests": {"cpu": "lots"}}}]
                )
            },
            "spec.template.spec.containers[0].resources.requests.cpu: invalid quantity 'lots'",
        ),
        ({"template": _template(nodeName="n0")}, "spec.template.spec.nodeName: set by the"),
        (
            {"template": _template(restartPolicy="OnFailure")},
            "spec.template.spec.restartPolicy: must be Never",
        ),
        ({"image": "x", "minGpus": 8}, "spec.minGpus: must be <= spec.gpus (4)"),
        ({"image": "x", "maxGpus": 2}, "spec.maxGpus: must be >= spec.gpus (4)"),
        ({"image": "x", "gpus": "4"}, "spec.gpus: must be a positive integer, not '4'"),
        ({"image": "x", "batchSize": 0}, "spec.batchSize: must be a positive integer"),
    ],
)
def test_job_spec_names_the_field_that_is_wrong(spec: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError) as exc:
        job_spec(_with(**spec))
    assert str(exc.value).startswith(error)


def test_a_template_job_and_an_elastic_one_are_valid() -> None:
    spec = job_spec(_with(template=_template(), minGpus=2, maxGpus=8))
    assert (spec.num_gpus, spec.min_gpus, spec.max_gpus) == (4, 2, 8)
    assert job_spec(_with(image="busybox")).num_gpus == 4


def _node_with_cpus(name: str, cpus: str) -> dict[str, Any]:
    body = make_node_body(name)
    body["status"]["allocatable"].update({"cpu": cpus, "memory": "512Gi", "pods": "110"})
    return body


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_a_job_waits_for_cpus_and_runs_once_the_other_finishes(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    api.create_node(_node_with_cpus("node-0", "10"))  # 8 GPUs, 10 CPUs
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", make_dljob("first", 2, duration_s=3, requests={"cpu": "8"}))
            wait_phases(api, "Running", ["first"])
            api.create_dljob("default", make_dljob("second", 2, requests={"cpu": "6"}))
            waiting = _wait_reason(api, "second", "WaitingForResources")
            assert waiting["message"] == "node-0: needs 6 CPU, 2 allocatable free"
            assert job_pods(api, "second") == []  # GPUs were free: only CPUs held it back
            assert dljob_status(api, "first")["phase"] == "Running"
            wait_phases(api, "Succeeded", ["first", "second"])
    finally:
        kubelet.stop()
    first, second = dljob_status(api, "first"), dljob_status(api, "second")
    assert second["startTime"] >= first["completionTime"]
    (pod,) = job_pods(api, "second")
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "6", crd.RESOURCE_GPU: "2"}  # its 2 GPUs as the plugin counts
    assert pod["metadata"]["labels"]["team"] == "test"  # the template's label kept


def _wait_reason(api: KubeApi, name: str, reason: str, timeout_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = dljob_status(api, name)
        if status.get("reason") == reason:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: no {reason} after {timeout_s} s: {status}")
        time.sleep(0.05)


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_the_real_server_refuses_min_gpus_above_gpus_naming_the_field(
    gpu_cluster: RealCluster,
) -> None:
    """The CRD's CEL rule, evaluated by kube-apiserver: such a job is never stored."""
    api = gpu_cluster.api
    with pytest.raises(kubernetes.client.ApiException) as refused:
        api.create_dljob("default", make_dljob("bad", 4, min_gpus=8))
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert [(c["field"], c["message"].endswith("must be <= spec.gpus")) for c in causes] == [
        ("spec.minGpus", True)
    ]
    assert api.list_dljobs("default")[0] == []


@pytest.mark.parametrize("fault_cluster", [1], indirect=True)
def test_an_invalid_job_says_which_field_and_is_queued_once_fixed(
    fault_cluster: GpuCluster,
) -> None:
    api = fault_cluster.api
    kubelet = Kubelet(fault_cluster.client, time_scale=1000).start()  # "hog" runs on
    try:
        with running_operator(fault_cluster.client):
            api.create_dljob("default", make_dljob("hog", 8))
            wait_phases(api, "Running", ["hog"])
            # The test server evaluates no CEL rule (the real one refuses this job, above):
            # the operator's own check, for a CRD installed without its rules, refuses it.
            api.create_dljob("default", make_dljob("bad", 4, min_gpus=8))
            wait_phases(api, "Invalid", ["bad"])
            status = dljob_status(api, "bad")
            invalid = _condition(status, "Invalid")
            assert invalid["status"] == "True" and invalid["reason"] == "InvalidSpec"
            assert invalid["message"] == "spec.minGpus: must be <= spec.gpus (4)"
            assert status["reason"] == "InvalidSpec"
            assert job_pods(api, "bad") == []
            core = kubernetes.client.CoreV1Api(fault_cluster.client)
            assert any(
                e.reason == "InvalidSpec"
                and e.involved_object.name == "bad"
                and e.type == "Warning"
                for e in core.list_namespaced_event("default").items
            )
            _replace_spec(api, "bad", minGpus=None)
            wait_phases(api, "Queued", ["bad"])  # behind "hog", no longer Invalid
            status = dljob_status(api, "bad")
            assert status["reason"] != "InvalidSpec"
            assert _condition(status, "Invalid")["status"] == "False"
            assert _condition(status, "Queued")["status"] == "True"
    finally:
        kubelet.stop()


def _condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == ctype)
    return found


def _replace_spec(api: KubeApi, name: str, **changes: Any) -> None:
    """kubectl apply's effect: a new spec, retried on conflicts with the operator."""
    for _ in range(50):
        obj = api.get_dljob("default", name)
        for key, value in changes.items():
            if value is None:
                obj["spec"].pop(key, None)
            else:
                obj["spec"][key] = value
        try:
            api.replace_dljob(obj)
            return
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
            time.sleep(0.05)
    raise AssertionError(f"{name}: could not replace the spec")
