"""Cluster mode: a cancel is committed before its DLJob is deleted, and a cancelled
job's DLJob is deleted however long Kubernetes refuses (api.cluster_mode.reaper).

On the session's real control plane: an admission policy bound for the test
(tests/controlplane/refusal.py) makes the kube-apiserver refuse every DLJob delete
(403 Forbidden) until the test removes its binding. The fixtures and helpers are
tests/api/test_cluster_mode.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.cluster_mode.backend import ClusterModeBackend
from api.settings import Settings
from operators import crd
from operators.kube import ApiException, KubeApi
from tests.api.builders import auth, statements_failing, submit, wait_for
from tests.api.test_cluster_mode import (
    JOBS,
    any_db,
    kinds,
    service,
    settings,
    settle,
)
from tests.controlplane.refusal import AdmissionRefusal
from tests.operators.real_cluster import RealCluster

__all__ = ["any_db", "settings"]


@pytest.fixture
def deletes(kube_cluster: RealCluster) -> Iterator[AdmissionRefusal]:
    """DLJob deletes refused on cue (refuse(probe(name)), allow(probe(name)))."""
    refusal = AdmissionRefusal(kube_cluster.client, "DELETE", crd.GROUP, crd.PLURAL)
    try:
        yield refusal
    finally:
        refusal.close()


def probe(api: KubeApi, name: str) -> Callable[[], Any]:
    """A dry-run delete of DLJob `name`, which must exist for admission to see it."""
    return lambda: api.custom.delete_namespaced_custom_object(
        crd.GROUP, crd.VERSION, "default", crd.PLURAL, name, dry_run="All"
    )


def dljob_exists(api: KubeApi, name: str) -> bool:
    try:
        api.get_dljob("default", name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def backend(client: Any) -> ClusterModeBackend:
    got = client.app.state.backend
    assert isinstance(got, ClusterModeBackend)
    return got


def test_a_cancel_kubernetes_refuses_is_acknowledged_and_its_dljob_deleted_once_it_can(
    any_db: Settings, kube_cluster: RealCluster, deletes: AdmissionRefusal
) -> None:
    api = kube_cluster.api
    with service(any_db) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=2)
        deletes.refuse(probe(api, job["dljob_name"]))
        r = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "Cancelled"
        assert dljob_exists(api, job["dljob_name"])  # refused: still there
        assert backend(client).reaper.pending() == 1
        assert client.post(f"{JOBS}/{job['id']}/cancel", headers=alice).status_code == 409
        got = client.get(f"{JOBS}/{job['id']}", headers=alice).json()
        assert got["status"] == "Cancelled"
        deletes.allow(probe(api, job["dljob_name"]))
        wait_for(lambda: not dljob_exists(api, job["dljob_name"]), timeout_s=60)
        wait_for(lambda: backend(client).reaper.pending() == 0, timeout_s=30)
        settle(client)
        # The follower saw the DLJob go: the job was closed already, nothing is added.
        assert kinds(client, alice, job["id"]) == ["submitted", "cancelled"]


def test_a_restart_deletes_the_dljob_of_a_job_cancelled_before_the_stop(
    any_db: Settings, kube_cluster: RealCluster, deletes: AdmissionRefusal
) -> None:
    """The service stopped between the cancel's commit and the DLJob's delete: the
    next start's list finds a Cancelled row with a live DLJob and deletes it."""
    api = kube_cluster.api
    with service(any_db) as client:
        alice = auth(client, "alice", "vision")
        cancelled = submit(client, alice, num_gpus=2)
        kept = submit(client, alice, num_gpus=1)
        deletes.refuse(probe(api, cancelled["dljob_name"]))
        r = client.post(f"{JOBS}/{cancelled['id']}/cancel", headers=alice)
        assert r.status_code == 200 and r.json()["status"] == "Cancelled"
    deletes.allow(probe(api, cancelled["dljob_name"]))
    assert dljob_exists(api, cancelled["dljob_name"])  # what a crash there leaves
    with service(any_db) as client:
        wait_for(lambda: not dljob_exists(api, cancelled["dljob_name"]), timeout_s=60)
        settle(client)
        assert dljob_exists(api, kept["dljob_name"])  # only the cancelled job's
        assert kinds(client, alice, cancelled["id"]) == ["submitted", "cancelled"]
        assert client.get(f"{JOBS}/{kept['id']}", headers=alice).json()["status"] == "Queued"


def test_a_cancel_whose_database_write_fails_deletes_nothing(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    api = kube_cluster.api
    with service(settings) as client:
        alice = auth(client, "alice", "vision")
        job = submit(client, alice, num_gpus=2)
        engine = client.app.state.engine  # type: ignore[attr-defined]

        with statements_failing(engine, "INSERT INTO job_events"):
            r = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
        assert r.status_code == 503, r.text
        assert dljob_exists(api, job["dljob_name"])
        assert client.get(f"{JOBS}/{job['id']}", headers=alice).json()["status"] == "Queued"
        again = client.post(f"{JOBS}/{job['id']}/cancel", headers=alice)
        assert again.status_code == 200 and again.json()["status"] == "Cancelled"
        assert not dljob_exists(api, job["dljob_name"])
        settle(client)
        assert kinds(client, alice, job["id"]) == ["submitted", "cancelled"]
