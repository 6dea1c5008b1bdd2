"""Cluster mode: the policy the operator runs shows from its first round, the policy
switch reaches the operator (ConfigMap), and what-if reads the DLJobs. On the
session's real control plane with the real operator."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from api.settings import Settings
from operators.policy_config import CONFIGMAP, read_policy
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import service, settings
from tests.operators.harness import running_operator
from tests.operators.real_cluster import RealCluster

__all__ = ["settings"]

ACTIVE = "/api/v1/policies/active"


def _active(client: TestClient, headers: dict[str, str]) -> Any:
    r = client.get(ACTIVE, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["name"]


def _summary(client: TestClient, headers: dict[str, str]) -> Any:
    r = client.get("/api/v1/cluster", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_switch_reaches_the_operator_and_what_if_reads_the_dljobs(
    settings: Settings, kube_cluster: RealCluster
) -> None:
    kube, api = kube_cluster.client, kube_cluster.api
    for i in range(2):
        kube_cluster.add_node(f"node-{i}")
    with (
        running_operator(
            kube, policy="gandiva", policy_options=(("gandiva", "quantum_s", 30),)
        ) as op,
        service(settings) as client,
    ):
        admin = auth(client, "root", "ops", "admin")
        alice = auth(client, "alice", "vision")
        # No admin chose a policy: the operator's own, with its options, from its first
        # round (it writes them into the ConfigMap), on the Cluster page's summary too.
        wait_for(lambda: _active(client, alice) == "gandiva", timeout_s=60)
        r = client.get(ACTIVE, headers=alice)
        assert r.json()["options"] == {"quantum_s": 30}
        summary = _summary(client, alice)
        assert summary["policy"] == "gandiva" and summary["policy_options"] == {"quantum_s": 30}
        assert summary["clock"] == "wall" and abs(summary["now_s"] - time.time()) < 60
        r = client.put(ACTIVE, json={"name": "srtf"}, headers=alice)
        assert r.status_code == 403
        r = client.put(ACTIVE, json={"name": "nope"}, headers=admin)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "name"]
        r = client.put(ACTIVE, json={"name": "srtf"}, headers=admin)
        assert r.status_code == 200, r.text
        assert read_policy(api, "default", CONFIGMAP) == "srtf"
        wait_for(lambda: op.controller.policy.name == "srtf", timeout_s=120)
        # The operator says so at its next round; the API reads it within 2 s.
        wait_for(lambda: _active(client, alice) == "srtf", timeout_s=30)
        r = client.put(ACTIVE, json={"name": "tiresias"}, headers=admin)
        assert r.status_code == 200
        wait_for(lambda: op.controller.policy.name == "tiresias", timeout_s=120)

        # No kubelet: the operator admits one job (its pods stay pending) and the
        # other waits for its GPUs. Which one: both arrive within the same second of
        # creationTimestamp, so Tiresias may take either.
        first = submit(client, alice, num_gpus=16, duration_s=600.0)
        second = submit(client, alice, num_gpus=16, duration_s=60.0)
        duration_s = {first["id"]: 600.0, second["id"]: 60.0}

        def admitted() -> str | None:
            jobs = client.get("/api/v1/jobs", headers=alice).json()["data"]
            ids = [j["id"] for j in jobs if j["status"] == "Admitted"]
            return ids[0] if len(ids) == 1 else None

        run = wait_for(admitted, timeout_s=120)
        wait = second["id"] if run == first["id"] else first["id"]
        r = client.post("/api/v1/whatif", json={"policies": ["fifo", "srtf"]}, headers=alice)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["active_policy"] == "tiresias"
        assert body["other_tenants_jobs"] == 0
        jobs = {j["id"]: j for j in body["jobs"]}
        assert set(jobs) == {first["id"], second["id"]}
        assert jobs[run]["status"] == "Admitted"
        fifo = {i: j["predicted_finish_s"]["fifo"] for i, j in jobs.items()}
        # FIFO: the admitted job (just started) ends, then the other runs.
        d = duration_s[run]
        assert max(d - 100, 0) < fifo[run] <= d + 10
        assert fifo[wait] > fifo[run]
        assert any(a.startswith("cluster mode") for a in body["approximations"])
