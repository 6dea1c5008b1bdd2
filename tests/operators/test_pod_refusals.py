"""Worker pods the real kube-apiserver refuses to create (operators/writer.py): a
malformed pod keeps its DLJob Invalid until the spec is edited; a refusal that may
pass (an admission webhook that does not answer: 500) requeues the job after a
back-off, not every round; both start once the cause is gone. A job's headless service
refused is made again at its next start. The 403 of RBAC is
tests/sandbox/test_operator_identity.py and tests/helm/test_install.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from operators import crd
from operators.jobs import JobRecord, State
from operators.kube.times import format_time
from operators.operator import Operator
from operators.pods import ShareRecord, WorkerSpec, service_name
from operators.writer import Writer
from tests.operators.builders import dljob_status, make_dljob
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

WEBHOOK = "gpuflow-test-unanswered"


def creates_refused(op: Operator, code: str, verb: str = "create") -> float:
    labels = {"verb": verb, "resource": "pods", "code": code}
    got = op.metrics.registry.get_sample_value("gpuflow_operator_api_errors_total", labels)
    return got or 0.0


def test_a_malformed_pod_keeps_the_job_invalid_until_its_spec_is_edited(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    job = make_dljob("bad", 1, duration_s=0.3, template=True)
    worker = job["spec"]["template"]["spec"]["containers"][0]
    worker["ports"] = [{"containerPort": 99999}]  # the DLJob's schema lets it by, a Pod's not
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            api.create_dljob("default", job)
            wait_phases(api, "Invalid", ["bad"])
            status = dljob_status(api, "bad")
            # No other try while the spec stays as it is (a round every 0.5 s at most).
            time.sleep(2.0)
            assert creates_refused(op, "422") == 1
            assert dljob_status(api, "bad") == status
            # The fix: the same job runs.
            stored = api.get_dljob("default", "bad")
            stored["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 9999}]
            api.replace_dljob(stored)
            wait_phases(api, "Succeeded", ["bad"])
    finally:
        kubelet.stop()
    assert status["reason"] == "InvalidPodTemplate"
    assert "containerPort: Invalid value: 99999" in status["message"], status
    assert status["attempt"] == 0 and status["observedGeneration"] == 1
    invalid = next(c for c in status["conditions"] if c["type"] == "Invalid")
    assert invalid["status"] == "True" and invalid["reason"] == "InvalidPodTemplate"
    assert dljob_status(api, "bad")["attempt"] == 1


@contextmanager
def unanswered_webhook(
    client: Any, job: str, resource: str = "pods", operation: str = "CREATE"
) -> Iterator[None]:
    """A validating webhook on the creation of `job`'s pods (or services) that nobody
    serves: the API server answers each such create with 500 (failurePolicy Fail)
    while it exists."""
    admission = kubernetes.client.AdmissionregistrationV1Api(client)
    hook = {
        "name": "unanswered.gpuflow.test",
        "clientConfig": {"url": "https://127.0.0.1:9/validate"},  # the discard port
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": [operation],
                "resources": [resource],
            }
        ],
        "objectSelector": {"matchLabels": {crd.LABEL_JOB: job}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 1,
    }
    admission.create_validating_webhook_configuration(
        {"metadata": {"name": WEBHOOK}, "webhooks": [hook]}
    )
    try:
        yield
    finally:
        admission.delete_validating_webhook_configuration(WEBHOOK)


def test_a_create_the_server_fails_is_tried_again_after_a_back_off(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            with unanswered_webhook(gpu_cluster.client, "hooked"):
                api.create_dljob("default", make_dljob("hooked", 1, duration_s=0.3))
                status = wait_for(
                    "the DLJob to wait with reason FailedCreate",
                    lambda: (
                        (s := dljob_status(api, "hooked")).get("reason") == "FailedCreate" and s
                    ),
                    30,
                )
                before = creates_refused(op, "500")
                time.sleep(6.0)  # back-offs of 1 s, 2 s, 4 s: two more tries, at most four
                tries = creates_refused(op, "500") - before
                assert job_pods(api, "hooked") == []
            wait_phases(api, "Succeeded", ["hooked"], timeout_s=60)
    finally:
        kubelet.stop()
    assert 1 <= tries <= 4, tries
    assert status["phase"] == "Queued" and status["attempt"] == 0
    assert "failed calling webhook" in status["message"], status
    assert "restartAfter" in status


def test_a_refused_service_is_made_again_at_the_jobs_next_start(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    obj = api.create_dljob("default", make_dljob("svc", 1))
    caches = SimpleNamespace(
        pods=SimpleNamespace(upsert=lambda pod: None),
        dljobs=SimpleNamespace(get=lambda key: None, upsert=lambda job: None),
    )
    writer = Writer(api, caches, lambda: True)  # type: ignore[arg-type]
    rec = JobRecord(obj, State.WAITING, [], 0)
    share = (ShareRecord("node-0", 0, "GPU-0", 1.0),)
    name = service_name(obj)
    try:
        with unanswered_webhook(gpu_cluster.client, "svc", "services"):
            writer.start(rec, WorkerSpec(obj, share, 1, None, format_time(time.time())))
            writer.flush()
        assert not api.core.list_namespaced_service(
            "default", field_selector=f"metadata.name={name}"
        ).items
        writer.start(rec, WorkerSpec(obj, share, 2, None, format_time(time.time())))
        writer.flush()
    finally:
        writer.close()
    assert api.core.read_namespaced_service(name, "default").spec.cluster_ip == "None"


def test_a_pod_delete_the_server_fails_is_sent_again(gpu_cluster: RealCluster) -> None:
    """The DLJob deleted while its pod's delete fails (500): the pod runs on, and once
    the server allows, the operator deletes it and the DLJob goes, without any change
    to the pod to wake it."""
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client) as op:
            api.create_dljob("default", make_dljob("stay", 1, duration_s=120))
            wait_phases(api, "Running", ["stay"])
            with unanswered_webhook(gpu_cluster.client, "stay", "pods", "DELETE"):
                api.delete_dljob("default", "stay")
                wait_for("a refused pod delete", lambda: creates_refused(op, "500", "delete"))
                (pod,) = job_pods(api, "stay")
                assert not pod["metadata"].get("deletionTimestamp")
            wait_for("the DLJob gone", lambda: not api.list_dljobs("default")[0], 30)
            assert job_pods(api, "stay") == [] or all(
                p["metadata"].get("deletionTimestamp") for p in job_pods(api, "stay")
            )
    finally:
        kubelet.stop()
