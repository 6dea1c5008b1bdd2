"""Cluster mode: REST jobs become DLJobs, and every DLJob's history reaches the database.

Against the session's real control plane (`kube_cluster`, tests/api/conftest.py) with
the DLJob CRD; the service runs with GPUFLOW_KUBECONFIG pointing at it. Statuses are
written as the operator writes them (operators.dljobs.resources.status_mutator through the
status subresource); one test runs the real operator and the kubelet simulator. Two
tests need a fault on cue and stay on the test API server (gpuflow/sandbox/kube,
docs/kube-test-server.md): a 500 on the next DLJob create, and a compaction (410 Gone)
of the follower's watch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.cluster_mode.backend import ClusterModeBackend
from api.cluster_mode.follower import Follower
from api.cluster_mode.history import record
from api.cluster_mode.manifest import dljob_name
from api.settings import Settings
from api.store.db import make_engine
from api.store.migrations import upgrade
from operators import crd
from operators.dljobs.resources import (
    ADMITTED,
    BACKOFF,
    LABEL_JOB_ID,
    LABEL_TENANT,
    PREEMPTED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Reasoned,
    status_mutator,
)
from operators.kube import KubeApi, Obj
from operators.kube.times import format_time
from tests.api.builders import auth, submit, wait_for
from tests.kube.fixtures import KubeServer, kube_server
from tests.operators.builders import DURATION_ENV, install_crd
from tests.operators.harness import running_operator
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

__all__ = ["kube_server"]

# What the helpers need of a cluster: `.kubeconfig` and `.api_client()`.
Kube = RealCluster | KubeServer

JOBS = "/api/v1/jobs"
T0 = float(int(time.time()) - 100)  # transition times the tests write, whole seconds


@pytest.fixture
def settings(tmp_path: Path, kube_cluster: RealCluster) -> Settings:
    return _settings(tmp_path, kube_cluster)


@pytest.fixture
def fault_settings(tmp_path: Path, kube_server: KubeServer) -> Settings:
    """Cluster mode on the test API server, for the tests that need its faults on cue."""
    install_crd(kube_server.api_client())
    return _settings(tmp_path, kube_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """Cluster-mode settings on SQLite or on the session's PostgreSQL database."""
    if request.param == "sqlite":
        return settings
    pg: Settings = request.getfixturevalue("pg_settings")  # truncated after the test
    return settings.model_copy(update={"database_url": pg.database_url})


def _settings(tmp_path: Path, server: Kube, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "kubeconfig": str(server.kubeconfig),
        # A watch thread ends at its next event, bookmark or timeout, and a real
        # kube-apiserver sends a bookmark about once a minute: a 1-s timeout keeps a
        # service's stop (its follower joins those threads) short.
        "kube_watch_timeout_s": 1,
        "kube_image": "registry.example/train:1",
        **overrides,
    }
    settings = Settings(**values)
    engine = make_engine(settings)
    upgrade(engine)
    engine.dispose()
    return settings


@contextmanager
def service(settings: Settings) -> Iterator[TestClient]:
    """The API in cluster mode; on exit its follower stops (a restart: exit, enter)."""
    with TestClient(create_app(settings)) as client:
        wait_for(lambda: follower(client).caught_up(), timeout_s=10)
        yield client


def follower(client: TestClient) -> Follower:
    backend = client.app.state.backend  # type: ignore[attr-defined]
    assert isinstance(backend, ClusterModeBackend)
    return backend.follower


def settle(client: TestClient) -> None:
    """Wait until the follower wrote everything it has seen."""
    time.sleep(0.1)  # the watch event of the last write is on its way
    wait_for(lambda: follower(client).caught_up(), timeout_s=10)


def kinds(client: TestClient, headers: dict[str, str], job_id: str) -> list[str]:
    """The job's event kinds; none while the follower has not recorded a kubectl job."""
    r = client.get(f"{JOBS}/{job_id}/events", headers=headers)
    if r.status_code == 404 and "not found" in r.text:
        return []
    assert r.status_code == 200, r.text
    return [e["kind"] for e in r.json()["data"]]


def kubectl_dljob(server: Kube, name: str, tenant: str, gpus: int = 4, **extra: Any) -> Obj:
    """A DLJob as `kubectl apply` makes it: the official client, no labels of ours."""
    custom = kubernetes.client.CustomObjectsApi(server.api_client())
    spec = {"image": "busybox", "gpus": gpus, "tenant": tenant, "model": "resnet50", **extra}
    body = {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    obj: Obj = custom.create_namespaced_custom_object(
        crd.GROUP, crd.VERSION, "default", crd.PLURAL, body
    )
    return obj


class Operatorish:
    """Writes a DLJob's status as the operator does, at chosen (whole-second) times."""

    def __init__(self, server: Kube, name: str) -> None:
        self.api = KubeApi(server.api_client())
        self.name = name

    def write(self, phase: str, why: Reasoned, at_s: float, **kw: Any) -> None:
        obj = self.api.get_dljob("default", self.name)
        self.api.update_status(obj, status_mutator(phase, why, now_s=at_s, **kw))

    def queued(self, at_s: float) -> None:
        self.write(QUEUED, Reasoned("InsufficientGpus", "needs 4 GPUs; 0 are free"), at_s)

    def admitted(self, at_s: float, attempt: int) -> None:
        fields = {
            "attempt": attempt,
            "restarts": attempt - 1,
            "nodes": "node-0",
            "startTime": format_time(at_s),
            "allocation": {
                "nodes": ["node-0"],
                "shares": [
                    {"node": "node-0", "gpu": g, "uuid": f"GPU-{g}", "fraction": 1.0}
                    for g in range(4)
                ],
            },
        }
        self.write(ADMITTED, Reasoned("Scheduled", "4 GPU(s) on node-0"), at_s, fields=fields)

    def running(self, at_s: float) -> None:
        self.write(RUNNING, Reasoned("WorkersRunning", "1 worker pod(s) running"), at_s)

    def preempted(self, at_s: float) -> None:
        why = Reasoned("PreemptedByPolicy", "preempted by the tiresias policy")
        pending = Reasoned("Restarting", "waits to restart from its checkpoint")
        self.write(PREEMPTED, why, at_s, pending=pending, fields={"nodes": ""})

    def succeeded(self, at_s: float) -> None:
        why = Reasoned("AllWorkersSucceeded", "every worker succeeded")
        self.write(SUCCEEDED, why, at_s, fields={"completionTime": format_time(at_s)})


def test_a_rest_submission_becomes_a_labelled_dljob(settings: Settings) -> None:
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        env = {DURATION_ENV: "0.3"}
        job = submit(
            client,
            alice,
            num_gpus=4,
            gpu_mem_mib=8000,
            command=["python", "t.py"],
            env=env,
            precision="bf16",
        )
        api = follower(client).api
        obj = api.get_dljob("default", job["dljob_name"])
        assert job["dljob_namespace"] == "default"
        assert job["dljob_name"] == dljob_name("train", job["id"])
        assert job["dljob_uid"] == obj["metadata"]["uid"]
        assert obj["metadata"]["labels"] == {LABEL_TENANT: "vision", LABEL_JOB_ID: job["id"]}
        spec = obj["spec"]
        assert spec["image"] == "registry.example/train:1"
        assert spec["command"] == ["python", "t.py"]
        assert spec["env"] == [{"name": DURATION_ENV, "value": "0.3"}]
        assert (spec["gpus"], spec["gpuMemMib"], spec["tenant"]) == (4, 8000, "vision")
        assert spec["expectedDurationSeconds"] == 100.0 and spec["model"] == "resnet50"
        assert spec["precision"] == "bf16"  # the operator reads it (operators/dljobs/resources.py)
        settle(client)
        got = client.get(f"{JOBS}/{job['id']}", headers=alice).json()
        assert got["dljob_uid"] == obj["metadata"]["uid"] and got["status"] == "Queued"
        assert kinds(client, alice, job["id"]) == ["submitted"]


def test_submit_refusals_name_the_field_or_say_kubernetes_is_down(
    tmp_path: Path, kube_server: KubeServer
) -> None:
    install_crd(kube_server.api_client())
    no_image = _settings(tmp_path, kube_server, kube_image=None)
    with service(no_image) as client:
        alice = auth(client, "alice", "vision")
        r = client.post(JOBS, json={"num_gpus": 1, "duration_s": 5}, headers=alice)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "image"]
        kube_server.fail_next("create", "dljobs", 500)
        r = client.post(JOBS, json={"num_gpus": 1, "duration_s": 5, "image": "x"}, headers=alice)
        assert r.status_code == 503 and "Kubernetes API" in r.json()["detail"]
        assert r.headers["Retry-After"] == "5"
        assert client.get(JOBS, headers=alice).json()["count"] == 0  # nothing half-made


def test_a_kubectl_dljob_is_seen_by_its_tenant_only(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    with service(settings) as client:
        alice, bob = auth(client, "alice", "vision"), auth(client, "bob", "nlp")
        root = auth(client, "root", "ops", "admin")
        obj = kubectl_dljob(kube_cluster, "from-kubectl", "vision", precision="fp16")
        job_id = obj["metadata"]["uid"].replace("-", "")
        listed = wait_for(lambda: client.get(JOBS, headers=alice).json()["data"])
        (job,) = listed
        assert job["id"] == job_id and job["tenant"] == "vision" and job["name"] == "from-kubectl"
        assert job["dljob_name"] == "from-kubectl" and job["num_gpus"] == 4
        assert job["precision"] == "fp16"
        assert client.get(JOBS, headers=bob).json()["count"] == 0
        assert client.get(f"{JOBS}/{job_id}", headers=bob).status_code == 404
        assert client.post(f"{JOBS}/{job_id}/cancel", headers=bob).status_code == 404
        assert client.get(f"{JOBS}/{job_id}", headers=root).status_code == 200
        assert kinds(client, alice, job_id) == ["submitted"]


def test_transitions_are_recorded_in_order_exactly_once(
    any_db: Settings, kube_cluster: RealCluster
) -> None:
    settings = any_db
    op = Operatorish(kube_cluster, "train")
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job_id = kubectl_dljob(kube_cluster, "train", "vision")["metadata"]["uid"].replace("-", "")
        # Written back to back, as the operator does: every version is seen.
        op.queued(T0)
        op.admitted(T0 + 1, attempt=1)
        op.running(T0 + 2)
        op.preempted(T0 + 3)
        op.admitted(T0 + 4, attempt=2)
        op.running(T0 + 5)
        live = ["submitted", "admitted", "started", "preempted", "admitted", "started"]
        wait_for(lambda: kinds(client, alice, job_id) == live)
        settle(client)
        assert kinds(client, alice, job_id) == live
        job = client.get(f"{JOBS}/{job_id}", headers=alice).json()
        assert (job["status"], job["restarts"], job["nodes"]) == ("Running", 1, "node-0")
        assert job["first_start_s"] == T0 + 2
    with service(settings) as client:  # a restart relists: nothing is added
        settle(client)
        assert kinds(client, alice, job_id) == live
    # While the service is down the job is preempted and restarted: read back from the
    # conditions when it comes up.
    op.preempted(T0 + 7)
    op.admitted(T0 + 8, attempt=3)
    op.running(T0 + 9)
    with service(settings) as client:
        missed = [*live, "preempted", "admitted", "started"]
        wait_for(lambda: kinds(client, alice, job_id) == missed)
        op.succeeded(T0 + 12)
        wait_for(lambda: kinds(client, alice, job_id) == [*missed, "finished"])
        settle(client)
        events = client.get(f"{JOBS}/{job_id}/events", headers=alice).json()["data"]
        assert [e["kind"] for e in events] == [*missed, "finished"]
        assert events[-1]["sim_s"] == T0 + 12 and events[3]["detail"].startswith("Preempted")
        job = client.get(f"{JOBS}/{job_id}", headers=alice).json()
        assert (job["status"], job["restarts"], job["progress"]) == ("Succeeded", 2, 1.0)
        assert job["finish_s"] == T0 + 12
    with service(settings) as client:
        settle(client)
        assert kinds(client, alice, job_id) == [*missed, "finished"]


def test_a_watch_too_old_relists_and_adds_nothing(
    fault_settings: Settings, kube_server: KubeServer
) -> None:
    """A compaction (410 Gone on the follower's watch) on cue: the test API server's
    `compact`, which a real server does only on its own schedule."""
    op = Operatorish(kube_server, "train")
    with service(fault_settings) as client:
        alice = auth(client, "alice", "vision")
        job_id = kubectl_dljob(kube_server, "train", "vision")["metadata"]["uid"].replace("-", "")
        op.queued(T0)
        op.admitted(T0 + 1, attempt=1)
        op.running(T0 + 2)
        live = ["submitted", "admitted", "started"]
        wait_for(lambda: kinds(client, alice, job_id) == live)
        settle(client)
        relists = follower(client).dljobs.relists
        kube_server.compact()  # the watch gets 410 Gone and relists
        wait_for(lambda: follower(client).dljobs.relists > relists)
        settle(client)
        assert kinds(client, alice, job_id) == live


def test_cancel_deletes_the_dljob_and_deletions_are_recorded(
    any_db: Settings, kube_cluster: RealCluster
) -> None:
    settings = any_db
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=2)
        api = kube_cluster.api
        r = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
        assert r.status_code == 200 and r.json()["status"] == "Cancelled"
        items, _ = api.list_dljobs("default")
        assert items == []
        assert client.post(f"{JOBS}/{job['id']}/cancel", headers=alice).status_code == 409
        settle(client)
        assert kinds(client, alice, job["id"]) == ["submitted", "cancelled"]
        # kubectl delete: while the service runs, and while it is down.
        live = kubectl_dljob(kube_cluster, "deleted-live", "vision")["metadata"]["uid"]
        down = kubectl_dljob(kube_cluster, "deleted-down", "vision")["metadata"]["uid"]
        settle(client)
        api.delete_dljob("default", "deleted-live")
        job_id = live.replace("-", "")
        wait_for(lambda: kinds(client, alice, job_id) == ["submitted", "cancelled"])
    api.delete_dljob("default", "deleted-down")
    with service(settings) as client:
        settle(client)
        wait_for(lambda: kinds(client, alice, down.replace("-", "")) == ["submitted", "cancelled"])
        for uid in (live, down):
            job_id = uid.replace("-", "")
            assert kinds(client, alice, job_id) == ["submitted", "cancelled"]
            got = client.get(f"{JOBS}/{job_id}", headers=alice).json()
            assert got["status"] == "Cancelled"


def test_nodes_and_cluster_come_from_the_nodes_annotations(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    for i in range(2):
        kube_cluster.add_node(f"node-{i}", rack=f"r{i}")
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        wait_for(lambda: client.get("/api/v1/cluster", headers=alice).json()["gpus"] == 16)
        r = client.post(JOBS, json={"num_gpus": 17, "duration_s": 5}, headers=alice)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "num_gpus"]
        job = submit(client, alice, num_gpus=4)
        op = Operatorish(kube_cluster, job["dljob_name"])
        op.admitted(T0, attempt=1)
        op.running(T0 + 1)
        wait_for(lambda: client.get("/api/v1/cluster", headers=alice).json()["running"] == 1)
        nodes = client.get("/api/v1/nodes", headers=alice).json()["data"]
        assert [(n["name"], n["gpus"], n["gpus_allocated"], n["jobs"]) for n in nodes] == [
            ("node-0", 8, 4.0, [job["id"]]),
            ("node-1", 8, 0.0, []),
        ]
        assert nodes[0]["gpu_type"] == "V100-SXM2-16GB" and nodes[1]["rack"] == 1
        summary = client.get("/api/v1/cluster", headers=alice).json()
        assert (summary["nodes"], summary["gpus_allocated"], summary["running"]) == (2, 4.0, 1)


def test_the_operator_runs_a_rest_job_and_its_history_reaches_the_database(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    kube = kube_cluster.client
    for i in range(2):
        kube_cluster.add_node(f"node-{i}")
    kubelet = Kubelet(kube).start()
    try:
        with running_operator(kube), service(settings) as client:
            alice = auth(client, "alice", "vision")
            env = {DURATION_ENV: "0.3"}
            a = submit(client, alice, num_gpus=8, duration_s=30.0, env=env)
            b = submit(client, alice, num_gpus=16, duration_s=30.0, env=env)  # waits for a

            def done() -> bool:
                jobs = client.get(JOBS, headers=alice).json()["data"]
                return all(j["status"] == "Succeeded" for j in jobs)

            wait_for(done, timeout_s=30)
            settle(client)
            for job in (a, b):
                got = kinds(client, alice, job["id"])
                assert got == ["submitted", "admitted", "started", "finished"], got
            row = client.get(f"{JOBS}/{b['id']}", headers=alice).json()
            assert row["attained_gpu_s"] > 0 and row["progress"] == 1.0
            assert row["first_start_s"] <= row["finish_s"]
    finally:
        kubelet.stop()


def test_a_restart_within_one_second_still_shows() -> None:
    """Stopped and started again within one second: condition times do not move, the
    restart count does."""
    api_obj: Obj = {"metadata": {"name": "j"}, "spec": {}, "status": {}}
    first = status_mutator(RUNNING, Reasoned("WorkersRunning", ""), now_s=T0, fields={})(api_obj)
    assert first is not None
    prev = record(None, first).state
    again = {**first, "status": {**first["status"], "restarts": 1, "attempt": 2}}
    again["status"]["startTime"] = format_time(T0)
    change = record(prev, again)
    assert [e.kind for e in change.events] == ["started"]
    assert record(change.state, again).events == []


def test_a_failure_s_back_off_is_its_own_status_and_a_stop_in_the_history() -> None:
    """Phase BackOff (a worker failed; issue 25): the job's status is BackOff, a
    waiting one with its queue position, and the history shows the stop."""
    api_obj: Obj = {"metadata": {"name": "j"}, "spec": {}, "status": {}}
    running = status_mutator(RUNNING, Reasoned("WorkersRunning", ""), now_s=T0)(api_obj)
    assert running is not None
    prev = record(None, running).state
    why = Reasoned("WorkerFailed", "pod j-1-0 failed with exit code 137: failure 1")
    wait = Reasoned("BackOff", "back-off: restarts after ...")
    backoff = status_mutator(BACKOFF, why, pending=wait, now_s=T0 + 5)(running)
    assert backoff is not None
    backoff["status"]["queuePosition"] = 2
    change = record(prev, backoff)
    assert [(e.kind, e.detail) for e in change.events] == [
        ("preempted", f"{why.reason}: {why.message}")
    ]
    assert change.values["status"] == "BackOff"
    assert (change.values["reason_code"], change.values["queue_position"]) == ("BackOff", 2)
