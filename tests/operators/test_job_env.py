"""Worker pods carry what the job's training library needs to report its metrics:
GPUFLOW_JOB_ID (the job's id in the API's database), GPUFLOW_API_URL (--api-url) and
GPUFLOW_METRICS_TOKEN from the job's Secret (required when there is an API to report to:
the pod waits for the Secret the API makes; optional without one)."""

from __future__ import annotations

from typing import Any

import pytest

from operators import crd
from operators.dljobs.resources import LABEL_JOB_ID, foreign_id
from operators.kube import KubeApi
from operators.pods import ShareRecord, WorkerSpec, worker_pods
from tests.operators.builders import make_dljob
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.real_cluster import RealCluster

API_URL = "http://gpuflow-api.gpuflow.svc:80/api/v1"
REST_ID = "0123456789abcdef0123456789abcdef"
UID = "5f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _job(labels: dict[str, str], env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    job = make_dljob("bert", 2)
    job["metadata"].update(uid=UID, labels=labels)
    job["spec"]["env"] = env or []
    return job


def _worker_env(job: dict[str, Any], api_url: str) -> list[dict[str, Any]]:
    shares = (ShareRecord("n0", 0, "GPU-a"), ShareRecord("n1", 0, "GPU-b"))
    pods = worker_pods(WorkerSpec(job, shares, 1, None, "2026-01-01T00:00:00Z"), api_url)
    assert len(pods) == 2
    ours = ("GPUFLOW_JOB_ID", "GPUFLOW_API_URL", "GPUFLOW_METRICS_TOKEN")
    envs = [p["spec"]["containers"][0]["env"] for p in pods]
    assert [[e for e in env if e["name"] in ours] for env in envs] == [
        [e for e in envs[1] if e["name"] in ours]
    ] * 2  # every rank alike
    env: list[dict[str, Any]] = envs[1]
    return env


SECRET_REF = {"secretKeyRef": {"name": "bert-gpuflow-metrics", "key": "token", "optional": False}}
NO_API_REF = {"secretKeyRef": {"name": "bert-gpuflow-metrics", "key": "token", "optional": True}}


@pytest.mark.parametrize(
    ("labels", "want_id"),
    [
        ({LABEL_JOB_ID: REST_ID}, REST_ID),  # a REST job: the id the API gave it
        ({}, UID.replace("-", "")),  # made with kubectl: the id the API derives
        ({LABEL_JOB_ID: "not-an-id"}, UID.replace("-", "")),  # a bad label is ignored
    ],
)
def test_every_worker_gets_the_job_id_the_api_url_and_the_token_reference(
    labels: dict[str, str], want_id: str
) -> None:
    env = _env({"env": _worker_env(_job(labels), API_URL)})
    assert env["GPUFLOW_JOB_ID"] == want_id
    assert env["GPUFLOW_API_URL"] == API_URL
    assert env["GPUFLOW_METRICS_TOKEN"] == SECRET_REF


def test_no_api_url_sets_none_and_the_operators_values_replace_the_users() -> None:
    spoofed = [
        {"name": "GPUFLOW_JOB_ID", "value": "someone-else"},
        {"name": "GPUFLOW_METRICS_TOKEN", "value": "stolen"},
        {"name": "GPUFLOW_API_URL", "value": "http://elsewhere"},
    ]
    env = _worker_env(_job({LABEL_JOB_ID: REST_ID}, spoofed), "")
    names = [e["name"] for e in env]
    assert names.count("GPUFLOW_JOB_ID") == 1 and names.count("GPUFLOW_METRICS_TOKEN") == 1
    got = _env({"env": env})
    assert got["GPUFLOW_JOB_ID"] == REST_ID and got["GPUFLOW_METRICS_TOKEN"] == NO_API_REF
    # Without --api-url the operator sets none, so the user's own value stays.
    assert got["GPUFLOW_API_URL"] == "http://elsewhere"


def test_foreign_id_is_the_uids_hex_digits_or_a_hash() -> None:
    assert foreign_id(UID) == UID.replace("-", "")
    other = foreign_id("not-a-uuid")
    assert len(other) == 32 and other != foreign_id("not-a-uuid-2")


def test_the_running_operator_injects_the_env_into_the_pods_it_creates(
    gpu_cluster: RealCluster,
) -> None:
    api = KubeApi(gpu_cluster.client)
    rest = make_dljob("rest", 8, duration_s=30.0)
    rest["metadata"]["labels"] = {LABEL_JOB_ID: REST_ID}
    api.create_dljob("default", rest)
    kubectl = api.create_dljob("default", make_dljob("kubectl", 8, duration_s=30.0))
    with running_operator(gpu_cluster.client, api_url=API_URL):
        wait_phases(api, "Admitted", ["rest", "kubectl"])
    for name, want_id in (("rest", REST_ID), ("kubectl", foreign_id(kubectl["metadata"]["uid"]))):
        (pod,) = job_pods(api, name)
        env = _env(pod["spec"]["containers"][0])
        assert env["GPUFLOW_JOB_ID"] == want_id
        assert env["GPUFLOW_API_URL"] == API_URL
        ref = {"name": f"{name}-gpuflow-metrics", "key": "token", "optional": False}
        assert env["GPUFLOW_METRICS_TOKEN"] == {"secretKeyRef": ref}
        assert pod["metadata"]["labels"][crd.LABEL_JOB] == name
