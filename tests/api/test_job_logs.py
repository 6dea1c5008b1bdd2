"""GET /api/v1/jobs/{id}/logs: in cluster mode the worker pod's log through the real
API server, which asks the node's kubelet (a ProcessKubelet running the pod as a
process and serving its log); scoped to the job's tenant; bad parameters 422 naming
them; in local mode a note that simulated jobs have no logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.backends import LOCAL_LOGS_NOTE
from tests.api.builders import auth, submit, wait_for
from tests.api.test_cluster_mode import _settings, service
from tests.operators.harness import running_operator
from tests.operators.real_cluster import RealCluster

JOBS = "/api/v1/jobs"
# Thirty numbered lines, then it keeps running (holding the node's 8 GPUs).
WORKER = "import time\nfor i in range(30):\n    print(f'step {i}', flush=True)\ntime.sleep(120)"


def _logs(client: TestClient, headers: dict[str, str], job_id: str, **query: Any) -> Any:
    return client.get(f"{JOBS}/{job_id}/logs", params=query, headers=headers)


def test_cluster_mode_reads_a_workers_log_through_the_kubelet(
    tmp_path: Path, kube_cluster: RealCluster
) -> None:
    kube_cluster.add_process_node("node-0", tmp_path / "sandbox")
    settings = _settings(tmp_path, kube_cluster)
    with service(settings) as client, running_operator(kube_cluster.client):
        alice, bob = auth(client, "alice", "vision"), auth(client, "bob", "speech")
        command = ["python", "-c", WORKER]
        runs = submit(client, alice, name="runs", num_gpus=8, command=command)
        waits = submit(client, alice, name="waits", num_gpus=8, command=command)

        def logged() -> Any:
            # The kubelet reports the pod Running after it starts the process, which
            # may have printed its lines by then: wait for both.
            body = _logs(client, alice, runs["id"], tail_lines=3).json()
            done = body["lines"] == ["step 27", "step 28", "step 29"]
            return body if done and body["phase"] == "Running" else None

        body = wait_for(logged, timeout_s=60)
        assert body["workers"] == 1 and body["worker"] == 0
        assert body["pod"].endswith("-0") and body["node"] == "node-0"
        assert body["phase"] == "Running" and body["note"] is None
        whole = _logs(client, alice, runs["id"]).json()["lines"]
        assert whole == [f"step {i}" for i in range(30)]

        queued = _logs(client, alice, waits["id"]).json()
        assert (queued["workers"], queued["lines"]) == (0, [])
        assert queued["note"].startswith("no worker pod now: the job is")

        past = _logs(client, alice, runs["id"], worker=1)
        assert past.status_code == 404
        assert past.json()["detail"] == "worker 1: the job's latest attempt has 1"
        # Another tenant's job is answered as one that does not exist.
        assert _logs(client, bob, runs["id"]).status_code == 404
        for query, field in (({"tail_lines": 0}, "tail_lines"), ({"worker": -1}, "worker")):
            refused = _logs(client, alice, runs["id"], **query)
            assert refused.status_code == 422
            assert refused.json()["detail"][0]["loc"] == ["query", field]
        assert _logs(client, alice, runs["id"], tail=5).status_code == 422  # unknown parameter


def test_local_mode_says_simulated_jobs_have_no_logs(sqlite_client: TestClient) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    job = submit(sqlite_client, alice)
    body = _logs(sqlite_client, alice, job["id"]).json()
    assert body == {
        "job_id": job["id"],
        "worker": 0,
        "workers": 0,
        "pod": None,
        "node": None,
        "phase": None,
        "lines": [],
        "note": LOCAL_LOGS_NOTE,
    }
    assert _logs(sqlite_client, alice, "0" * 32).status_code == 404
