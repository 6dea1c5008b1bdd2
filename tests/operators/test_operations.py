"""The operator as an SRE runs it: decision and API-error log lines, a missing CRD,
the Lease released on stop (a standby leads within 2 s), /metrics, `wake_s`, and
`gpuflow operator run` stopped by SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from operators import crd
from operators.kube import KubeApi
from operators.kube.leader import LeaseConfig
from operators.operator import Operator, OperatorConfig
from tests.kube.fixtures import KubeServer
from tests.operators.builders import install_crd, make_dljob, make_node_body
from tests.operators.conftest import GpuCluster
from tests.operators.harness import FAST_LEASE, running_operator, wait_phases
from tests.operators.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
CRD_COMMAND = "kubectl apply -f helm/gpuflow/crds/dljob.yaml"
# A realistic lease duration with quick retries: a standby that waited for the
# Lease to expire would take 15 s, so leading within 2 s shows the release worked.
SLOW_EXPIRY = replace(FAST_LEASE, lease_duration_s=15.0, renew_deadline_s=10.0)


def operator_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("operators.") and text in r.getMessage()]


def wait_until(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def lease_spec(api: KubeApi) -> dict[str, Any]:
    spec: dict[str, Any] = (api.get_lease("default", "gpuflow-operator") or {}).get("spec", {})
    return spec


def test_logs_show_each_decision_and_each_api_error(
    fault_cluster: GpuCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    api, server = fault_cluster.api, fault_cluster.server
    api.create_dljob("default", make_dljob("a", 4))
    with running_operator(fault_cluster.client) as op:
        wait_phases(api, "Admitted", ["a"])
        server.fail_next("create", "pods", 500)
        api.create_dljob("default", make_dljob("b", 8))
        wait_until(lambda: operator_lines(caplog, "api error verb=create resource=pods"))
    (start,) = operator_lines(caplog, "decision job=default/a action=start")
    assert "gpus=4 nodes=node-0" in start.getMessage()
    assert "reason=Scheduled" in start.getMessage()
    (error,) = operator_lines(caplog, "api error verb=create resource=pods")
    assert "code=500" in error.getMessage() and "message=" in error.getMessage()
    assert error.levelno == logging.WARNING
    assert not [r for r in caplog.records if r.exc_info]  # one line each, no traceback
    labels = {"verb": "create", "resource": "pods", "code": "500"}
    assert op.metrics.registry.get_sample_value("gpuflow_operator_api_errors_total", labels) == 1


def test_a_missing_crd_is_one_line_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with KubeServer() as server:
        client = server.api_client()
        KubeApi(client).create_node(make_node_body("node-0"))
        with running_operator(client):
            time.sleep(3.0)
            lists = [r for r in server.requests if "/dljobs" in r.path and "watch=" not in r.path]
            missing = operator_lines(caplog, "dljobs")
            install_crd(client)
            api = KubeApi(client)
            api.create_dljob("default", make_dljob("a", 4))
            wait_phases(api, "Admitted", ["a"], timeout_s=15)
    # Back-off from 0.8 s: lists at 0, 0.8 and 2.4 s (twice a second would be 6).
    assert 2 <= len(lists) <= 4
    (line,) = missing
    assert line.getMessage().startswith("not served resource=dljobs")
    assert CRD_COMMAND in line.getMessage()
    assert not [r for r in caplog.records if r.exc_info]
    assert operator_lines(caplog, "served again resource=dljobs")


def test_install_crd_creates_the_crd_or_replaces_it(kube_server: KubeServer) -> None:
    api = KubeApi(kube_server.api_client())
    api.apply_crd(crd.load_crd_manifest())
    api.apply_crd(crd.load_crd_manifest())  # installed: replaced, not an error
    kube_server.wait_for(lambda: api.list_dljobs("default")[0] == [])
    api.create_dljob("default", make_dljob("a"))
    assert [o["metadata"]["name"] for o in api.list_dljobs("default")[0]] == ["a"]


def start_operator(
    client: Any, identity: str, lease: LeaseConfig
) -> tuple[Operator, Callable[[], int]]:
    """An operator running in a thread, and the function that stops it and returns
    the exit code of its `run()`."""
    config = OperatorConfig(identity=identity, lease=lease, interval_s=5.0, watch_timeout_s=5)
    op = Operator(KubeApi(client), config)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(op.run()), daemon=True)
    thread.start()

    def stop() -> int:
        op.stop()
        thread.join(timeout=10)
        return codes[0] if codes else -1

    return op, stop


def test_a_stopped_leader_releases_the_lease_and_a_standby_leads_within_2_s(
    gpu_cluster: RealCluster,
) -> None:
    api, client = gpu_cluster.api, gpu_cluster.client
    first, stop_first = start_operator(client, "first", SLOW_EXPIRY)
    try:
        wait_until(lambda: first.rounds > 0)
        standby, stop_standby = start_operator(client, "standby", SLOW_EXPIRY)
    except BaseException:
        stop_first()
        raise
    try:
        wait_until(standby.caches.synced)
        time.sleep(0.5)  # two of the standby's retries: it does not take a held Lease
        assert not standby.elector.leading()
        assert lease_spec(api)["holderIdentity"] == "first"
        stopped_at = time.monotonic()
        assert stop_first() == 0
        api.create_dljob("default", make_dljob("after", 4))
        wait_phases(api, "Admitted", ["after"], timeout_s=15)
        took_s = time.monotonic() - stopped_at
        assert standby.elector.leading()
    finally:
        stop_first()
        code = stop_standby()
    assert took_s < 2.0, f"the standby scheduled {took_s:.2f} s after the leader stopped"
    assert code == 0
    assert lease_spec(api)["holderIdentity"] == ""  # the standby released it in turn


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_metrics_show_rounds_pending_reasons_and_gpus(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    api.create_dljob("default", make_dljob("a", 8))  # the node's 8 GPUs (no kubelet: held)
    with running_operator(gpu_cluster.client, metrics_port=0) as op:
        wait_phases(api, "Admitted", ["a"])
        api.create_dljob("default", make_dljob("b", 4))  # fits the node, not now
        wait_phases(api, "Queued", ["b"])
        assert op.metrics_server is not None
        port = op.metrics_server.server_port
        pending = ("gpuflow_operator_pending_jobs", (("reason", "InsufficientGpus"),))
        wait_until(lambda: scrape(port).get(pending) == 1.0, timeout_s=5)
        samples = scrape(port)
    assert samples[("gpuflow_operator_round_seconds_count", ())] > 0
    assert samples[("gpuflow_operator_queue_length", ())] == 1
    assert samples[("gpuflow_operator_running_jobs", ())] == 1
    assert samples[("gpuflow_operator_gpus_allocated", ())] == 8
    assert samples[("gpuflow_operator_gpus_total", ())] == 8
    assert samples[("gpuflow_operator_leader", ())] == 1
    tenant = (("tenant", "default"),)
    assert samples[("gpuflow_operator_waiting_jobs", tenant)] == 1
    assert samples[("gpuflow_operator_oldest_wait_seconds", tenant)] >= 0
    assert samples[("gpuflow_operator_wait_seconds_count", tenant)] == 1  # a, started
    assert samples[("gpuflow_operator_gpus", (("state", "allocated"),))] == 8
    assert samples[("gpuflow_operator_gpus", (("state", "free"),))] == 0
    scheduled = (("action", "start"), ("reason", "Scheduled"))
    assert samples[("gpuflow_operator_decisions_total", scheduled)] == 1


def test_the_loop_wakes_at_the_backends_deadline(gpu_cluster: RealCluster) -> None:
    with running_operator(gpu_cluster.client, interval_s=30.0) as op:
        wait_until(lambda: op.rounds > 0)
        op.backend.next_wake_s = lambda: time.time() + 0.2  # type: ignore[method-assign]
        op.wake.set()  # the wait under way was computed before
        time.sleep(0.1)
        before = op.rounds
        time.sleep(1.2)
        # Nothing changes in the cluster: only the deadline runs rounds (30 s apart else).
        assert op.rounds - before >= 4


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_gpuflow_operator_run_stops_on_sigterm_and_releases_the_lease(
    gpu_cluster: RealCluster,
) -> None:
    api = gpu_cluster.api
    taken = socket.socket()  # the metrics port is taken: the operator runs without
    taken.bind(("0.0.0.0", 0))
    taken.listen()
    cmd = [
        sys.executable, "-m", "gpuflow.operator_cmd", "operator", "run",
        "--kubeconfig", str(gpu_cluster.kubeconfig), "--identity", "sub",
        "--metrics-port", str(taken.getsockname()[1]), "--log-format", "json",
        "--retry-period", "0.25", "--install-crd",  # installed already: replaced
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, env={**os.environ})
    try:
        api.create_dljob("default", make_dljob("a", 4))
        wait_phases(api, "Admitted", ["a"], timeout_s=30)
        assert lease_spec(api)["holderIdentity"] == "sub"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        taken.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    spec = lease_spec(api)
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    lines = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    events = {(line.get("event"), line.get("job"), line.get("action")) for line in lines}
    assert ("decision", "default/a", "start") in events
    assert ("released the lease", None, None) in events
    assert ("metrics not served", None, None) in events
