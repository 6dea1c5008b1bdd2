"""The operator writes each waiting DLJob's place in the policy's order
(status.queuePosition) and, on a stopped one, who took its GPUs (status.preemptedBy and
its condition's message): against the real control plane, under SRTF."""

from __future__ import annotations

from typing import Any

import pytest

from operators.dljobs.resources import database_id
from operators.kube import KubeApi
from tests import waiting
from tests.operators.builders import make_dljob
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

TIMEOUT_S = 60.0  # a slow, loaded CI machine; every wait ends as soon as it holds


def _job(name: str, expected_s: float) -> dict[str, Any]:
    """A DLJob on all 8 GPUs of the node whose remaining time SRTF reads as `expected_s`."""
    body = make_dljob(name, 8)
    body["spec"]["expectedDurationSeconds"] = expected_s
    return body


def _status(api: KubeApi, name: str) -> dict[str, Any]:
    status: dict[str, Any] = api.get_dljob("default", name).get("status") or {}
    return status


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_srtf_names_the_preemptor_and_numbers_the_queue(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs keep running
    try:
        with running_operator(gpu_cluster.client, policy="srtf"):
            api.create_dljob("default", _job("long", 1e6))
            wait_phases(api, "Running", ["long"], timeout_s=TIMEOUT_S)
            api.create_dljob("default", _job("short", 1e4))
            wait_phases(api, "Preempted", ["long"], timeout_s=TIMEOUT_S)
            wait_phases(api, "Running", ["short"], timeout_s=TIMEOUT_S)
            api.create_dljob("default", _job("mid", 1e5))

            def numbered() -> bool:
                mid, long = _status(api, "mid"), _status(api, "long")
                return mid.get("queuePosition") == 1 and long.get("queuePosition") == 2

            waiting.wait_for("mid 1st and long 2nd in the queue", numbered, TIMEOUT_S)
            assert "queuePosition" not in _status(api, "short")
    finally:
        kubelet.stop()
    short_id = database_id(api.get_dljob("default", "short"))
    status = _status(api, "long")
    assert status["preemptedBy"] == [short_id]
    preempted = next(c for c in status["conditions"] if c["type"] == "Preempted")
    assert preempted["reason"] == "PreemptedByPolicy"
    assert preempted["message"] == f"preempted by the srtf policy; preempted by job {short_id}"
