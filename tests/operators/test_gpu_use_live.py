"""A job's GPU use measured by the node agent reaches the operator's round and outlives
the job's pods: against the real control plane, under SRTF, a running job whose worker
the agent reports at 6 % alone is preempted, and its status keeps that figure
(status.gpuUse) for its view while it waits (operators/views.py)."""

from __future__ import annotations

import json
import time

import pytest

from operators import crd
from operators.kube import KubeApi, Resource
from operators.pods import pod_name
from tests import waiting
from tests.operators.builders import make_dljob
from tests.operators.conftest import GpuCluster
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet

TIMEOUT_S = 60.0  # a slow, loaded CI machine; every wait ends as soon as it holds


def _report(api: KubeApi, node: str, pod: str) -> None:
    """What the node's agent publishes for `pod` alone on its GPUs at 6 %, now."""
    figure = {"utilPct": 6, "memMib": 1536, "alone": True, "aloneUtilPct": 6}
    doc = {"time": int(time.time()), "gpus": [], "pods": {f"default/{pod}": figure}}
    api.patch_node(node, {"metadata": {"annotations": {crd.ANN_NODE_GPU_STATUS: json.dumps(doc)}}})


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_preempted_job_keeps_its_measured_utilisation(gpu_cluster: GpuCluster) -> None:
    api = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs keep running
    try:
        with running_operator(gpu_cluster.client, policy="srtf"):
            # Reported before the job exists (its first worker's name is known), so
            # every round that sees the job running sees the report too.
            _report(api, "node-0", pod_name("long", 1, 0))
            long = make_dljob("long", 8)
            long["spec"]["expectedDurationSeconds"] = 1e6
            api.create_dljob("default", long)
            wait_phases(api, "Running", ["long"], timeout_s=TIMEOUT_S)
            pods, _ = api.list_objects(Resource("pods", label_selector=f"{crd.LABEL_JOB}=long"))
            assert [p["metadata"]["name"] for p in pods] == [pod_name("long", 1, 0)]
            short = make_dljob("short", 8)
            short["spec"]["expectedDurationSeconds"] = 1e4
            api.create_dljob("default", short)
            wait_phases(api, "Preempted", ["long"], timeout_s=TIMEOUT_S)

            def recorded() -> bool:
                status = api.get_dljob("default", "long").get("status") or {}
                return "gpuUse" in status

            waiting.wait_for("long's GPU use in its status", recorded, TIMEOUT_S)
    finally:
        kubelet.stop()
    use = api.get_dljob("default", "long")["status"]["gpuUse"]
    assert (use["utilPct"], use["memMib"]) == (6.0, 1536)
