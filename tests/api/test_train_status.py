"""Cluster mode's metrics path: tokens reach the pods through a Secret, and a job's
reports reach its DLJob's status.train, throttled, without losing the operator's
fields. On the session's real control plane with the DLJob CRD and PostgreSQL
database (creates refused on cue by an admission policy, tests/controlplane/refusal.py);
the test that counts the status writes the server received (`requests`) runs on the
test API server (gpuflow/sandbox/kube, docs/kube-test-server.md)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.cluster_mode.backend import ClusterModeBackend
from api.http.security import hash_token
from api.settings import Settings
from api.store.models import Job
from operators import crd
from operators.dljobs.resources import RUNNING, Reasoned, foreign_id, status_mutator
from operators.kube import KubeApi, Obj
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import Kube, _settings, kubectl_dljob, service
from tests.controlplane.refusal import AdmissionRefusal
from tests.kube.fixtures import KubeServer, kube_server
from tests.operators.builders import install_crd, make_dljob
from tests.operators.real_cluster import RealCluster

__all__ = ["kube_server"]

JOBS = "/api/v1/jobs"
# Wide enough that a burst of five reports fits in half of it on a loaded 2-core CI
# machine (0.64 s measured there).
INTERVAL_S = 3.0


@pytest.fixture
def settings(tmp_path: Path, kube_cluster: RealCluster, pg_settings: Settings) -> Settings:
    return _pg_settings(tmp_path, kube_cluster, pg_settings)


@pytest.fixture
def fault_settings(tmp_path: Path, kube_server: KubeServer, pg_settings: Settings) -> Settings:
    install_crd(kube_server.api_client())
    return _pg_settings(tmp_path, kube_server, pg_settings)


def _pg_settings(tmp_path: Path, kube: Kube, pg_settings: Settings) -> Settings:
    return _settings(
        tmp_path,
        kube,
        database_url=pg_settings.database_url,
        train_summary_interval_s=INTERVAL_S,
    )


def backend(client: TestClient) -> ClusterModeBackend:
    b = client.app.state.backend  # type: ignore[attr-defined]
    assert isinstance(b, ClusterModeBackend)
    return b


def secret_or_none(server: Kube, dljob: str) -> Obj | None:
    return KubeApi(server.api_client()).get_secret("default", f"{dljob}-gpuflow-metrics")


def secret(server: Kube, dljob: str) -> Obj:
    got = secret_or_none(server, dljob)
    assert got is not None, f"no Secret for {dljob}"
    return got


def token_in(secret_obj: Obj) -> str:
    return base64.b64decode(secret_obj["data"]["token"]).decode()


def report(client: TestClient, job_id: str, token: str, step: int, **figures: float) -> int:
    body = {"metrics": [{"name": n, "value": v, "step": step} for n, v in figures.items()]}
    r = client.post(f"{JOBS}/{job_id}/metrics", json=body, headers={"X-Job-Token": token})
    return r.status_code


def status_writes(server: KubeServer, name: str) -> int:
    path = f"/{crd.PLURAL}/{name}/status"
    return sum(1 for r in list(server.requests) if r.method == "PUT" and path in r.path)


def train_of(server: Kube, name: str) -> dict[str, Any]:
    obj = KubeApi(server.api_client()).get_dljob("default", name)
    train: dict[str, Any] = (obj.get("status") or {}).get("train") or {}
    return train


def test_a_rest_jobs_secret_holds_the_token_that_reports_are_accepted_with(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=2)
        got = secret(kube_cluster, job["dljob_name"])
        assert token_in(got) == job["metrics_token"]
        meta = got["metadata"]
        assert meta["labels"] == {crd.LABEL_JOB: job["dljob_name"]}
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            crd.KIND,
            job["dljob_name"],
            job["dljob_uid"],
        )
        # Owned, not controlled: the operator controls the job, and blocking the owner's
        # deletion would need RBAC on dljobs/finalizers.
        assert "controller" not in owner and "blockOwnerDeletion" not in owner
        assert report(client, job["id"], token_in(got), 1, loss=0.5) == 201
        assert report(client, job["id"], "gf_wrong", 1, loss=0.5) == 404


@pytest.fixture
def refusals(kube_cluster: RealCluster) -> Iterator[tuple[AdmissionRefusal, AdmissionRefusal]]:
    """Secret creates and DLJob creates refused on cue by the real API server."""
    with ExitStack() as stack:
        secrets = AdmissionRefusal(kube_cluster.client, "CREATE", "", "secrets")
        stack.callback(secrets.close)
        dljobs = AdmissionRefusal(kube_cluster.client, "CREATE", crd.GROUP, crd.PLURAL)
        stack.callback(dljobs.close)
        yield secrets, dljobs


def test_a_refused_secret_fails_the_submission_and_leaves_nothing(
    settings: Settings,
    kube_cluster: RealCluster,
    refusals: tuple[AdmissionRefusal, AdmissionRefusal],
) -> None:
    secrets, dljobs = refusals
    core, custom = kube_cluster.api.core, kube_cluster.api.custom
    probe_secret = {"metadata": {"name": "probe"}, "stringData": {"token": "x"}}

    def secret_probe() -> Any:
        return core.create_namespaced_secret("default", probe_secret, dry_run="All")

    def dljob_probe() -> Any:
        return custom.create_namespaced_custom_object(
            crd.GROUP, crd.VERSION, "default", crd.PLURAL, make_dljob("probe"), dry_run="All"
        )

    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        secrets.refuse(secret_probe)
        r = client.post(JOBS, json={"num_gpus": 1, "duration_s": 5}, headers=alice)
        assert r.status_code == 503 and "Kubernetes API" in r.json()["detail"]
        assert "refused by the test" in r.json()["detail"]
        assert client.get(JOBS, headers=alice).json()["count"] == 0
        assert kube_cluster.api.list_dljobs("default")[0] == []
        secrets.allow(secret_probe)
        # The DLJob refused after its Secret was made: the Secret goes too.
        dljobs.refuse(dljob_probe)
        r = client.post(JOBS, json={"num_gpus": 1, "duration_s": 5}, headers=alice)
        assert r.status_code == 503 and "refused by the test" in r.json()["detail"]
        listed = core.list_namespaced_secret("default", _preload_content=False)
        assert json.loads(listed.data)["items"] == []
        assert client.get(JOBS, headers=alice).json()["count"] == 0


def test_a_kubectl_dljob_gets_a_secret_at_adoption(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    with service(settings) as client:
        auth(client, "alice", "vision")
        obj = kubectl_dljob(kube_cluster, "from-kubectl", "vision")
        job_id = foreign_id(obj["metadata"]["uid"])
        got = wait_for(lambda: secret_or_none(kube_cluster, "from-kubectl"))
        assert got["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        token = token_in(got)
        sessions = client.app.state.sessions  # type: ignore[attr-defined]

        def stored() -> str | None:
            with sessions() as session:
                row = session.get(Job, job_id)
                return None if row is None else row.metrics_token_hash

        assert wait_for(stored) == hash_token(token)
        assert report(client, job_id, token, 3, loss=1.5) == 201


def test_reports_reach_status_train_at_most_once_per_interval_with_the_last_landing(
    fault_settings: Settings, kube_server: KubeServer
) -> None:
    with service(fault_settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=4)
        name, token = job["dljob_name"], job["metrics_token"]
        before = status_writes(kube_server, name)
        started = time.monotonic()
        # A burst well inside one interval: the first is written at once, the rest in
        # one trailing write that holds the last.
        assert report(client, job["id"], token, 10, loss=2.0, samples_per_s=100.0,
                      batch_size=64, gpus=2, grad_sqr=4.0, grad_var=9.0) == 201  # fmt: skip
        for step in (20, 30, 40):
            assert report(client, job["id"], token, step, loss=2.0 - step / 100,
                          samples_per_s=110.0, batch_size=64, gpus=2) == 201  # fmt: skip
        assert report(client, job["id"], token, 50, loss=1.4, samples_per_s=400.0,
                      batch_size=256, gpus=4, grad_sqr=5.0, grad_var=8.0) == 201  # fmt: skip
        burst_s = time.monotonic() - started
        assert burst_s < INTERVAL_S / 2, "the burst must fit in one interval"
        wait_for(lambda: train_of(kube_server, name).get("step") == 50, timeout_s=5)
        landed_s = time.monotonic() - started
        time.sleep(INTERVAL_S * 1.5)  # nothing more is written
        assert status_writes(kube_server, name) - before == 2
        assert landed_s >= INTERVAL_S * 0.9  # the trailing write waited its turn
        train = train_of(kube_server, name)
        assert train["throughput"] == [
            {"gpus": 2, "batchSize": 64, "samplesPerSecond": pytest.approx(107.5), "steps": 31},
            {"gpus": 4, "batchSize": 256, "samplesPerSecond": 400.0, "steps": 10},
        ]
        assert train["loss"] == [[10, 2.0], [20, 1.8], [30, 1.7], [40, 1.6], [50, 1.4]]
        assert (train["gradSqr"], train["gradVar"]) == (5.0, 8.0)
        assert (train["batchSize"], train["gpus"], train["samplesPerSecond"]) == (256, 4, 400.0)
        assert train["reportedAt"].endswith("Z") and "." in train["reportedAt"]
        # Quiet for an interval: the next report is written at once.
        assert report(client, job["id"], token, 60, loss=1.3) == 201
        wait_for(lambda: train_of(kube_server, name).get("step") == 60, timeout_s=INTERVAL_S / 2)


def test_an_operator_status_write_in_between_is_kept(
    settings: Settings, kube_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=4)
        name = job["dljob_name"]
        operator = kube_cluster.api
        api = backend(client).api
        original = api.replace_dljob_status
        calls: list[str] = []
        once = threading.Lock()

        def operator_writes_first(obj: Obj) -> Obj:
            # The operator writes between the train writer's read and its write: the
            # train writer's resourceVersion is stale, its write gets 409.
            calls.append(obj["metadata"]["resourceVersion"])
            if once.acquire(blocking=False):
                fresh = operator.get_dljob("default", name)
                why = Reasoned("WorkersRunning", "1 worker pod(s) running")
                fields = {"nodes": "node-0", "attempt": 1}
                mutate = status_mutator(RUNNING, why, fields=fields, now_s=time.time())
                operator.update_status(fresh, mutate)
            return original(obj)

        monkeypatch.setattr(api, "replace_dljob_status", operator_writes_first)
        assert report(client, job["id"], job["metrics_token"], 5, loss=0.7) == 201
        wait_for(lambda: train_of(kube_cluster, name).get("step") == 5, timeout_s=5)
        status = operator.get_dljob("default", name)["status"]
        assert (status["phase"], status["nodes"], status["attempt"]) == (RUNNING, "node-0", 1)
        assert status["train"]["loss"] == [[5, 0.7]]
        assert len(calls) == 2 and calls[0] != calls[1]  # refused once, written on a fresh read
