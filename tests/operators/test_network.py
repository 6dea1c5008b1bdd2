"""The network allocator's rates on a live cluster: the pure computation, then the
operator publishing them on pods and DLJobs, and the agent reporting them back."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from controller.model import Cluster, Rack
from controller.network import ALLOCATORS
from operators import crd
from operators.agent.main import AgentOptions, run_agent
from operators.kube import KubeApi
from operators.network import RunningJob, UnknownNetworkError, egress_rates, make_publisher
from tests.builders import make_node
from tests.operators.builders import make_dljob
from tests.operators.fake_nvml import FakeNvml
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.waiting import wait_for

# --- the pure computation -----------------------------------------------------------

# Two racks of two nodes behind 100 Gbit/s uplinks; n3's NIC is a slow 25 Gbit/s.
SLOW_NIC_GBPS = 25.0
UPLINK_GBPS = 100.0


def two_racks() -> Cluster:
    nodes = (
        make_node("n0", rack=0),
        make_node("n1", rack=0),
        make_node("n2", rack=1),
        make_node("n3", rack=1, nic_gbps=SLOW_NIC_GBPS),
    )
    racks = (Rack("r0", UPLINK_GBPS), Rack("r1", UPLINK_GBPS))
    return Cluster("two-racks", nodes, racks)


def running(job_id: str, *nodes: str) -> RunningJob:
    pods = tuple(f"default/{job_id}-1-{rank}" for rank in range(len(nodes)))
    return RunningJob(job_id, nodes, pods, grad_mib=100.0, arrival_s=float(ord(job_id[0])))


def test_two_jobs_across_one_uplink_get_max_min_shares() -> None:
    # a (n0 -> n2) and b (n1 -> n3) both leave rack r0 on its 100 Gbit/s uplink; b is
    # held to 25 by n3's NIC, so max-min gives a the other 75, not an equal 50.
    rates = egress_rates("fair", two_racks(), [running("a", "n0", "n2"), running("b", "n1", "n3")])
    assert rates.job_gbps == {"a": 75.0, "b": 25.0}
    assert rates.pod_gbps == {
        "default/a-1-0": 75.0,
        "default/a-1-1": 75.0,
        "default/b-1-0": 25.0,
        "default/b-1-1": 25.0,
    }


def test_a_single_node_job_gets_no_rate() -> None:
    rates = egress_rates("fair", two_racks(), [running("c", "n0"), running("a", "n1", "n2")])
    assert rates.job_gbps == {"a": 100.0}  # alone on the uplink: its NICs bind
    assert not any(pod.startswith("default/c-") for pod in rates.pod_gbps)


def test_rates_change_when_a_job_leaves() -> None:
    cluster = two_racks()
    both = egress_rates("fair", cluster, [running("a", "n0", "n2"), running("b", "n1", "n2")])
    # a and b both enter n2 through its 100 Gbit/s NIC: 50 each.
    assert both.job_gbps == {"a": 50.0, "b": 50.0}
    alone = egress_rates("fair", cluster, [running("a", "n0", "n2")])
    assert alone.job_gbps == {"a": 100.0}


def test_a_job_on_a_node_the_cluster_lost_gets_no_rate() -> None:
    rates = egress_rates("fair", two_racks(), [running("a", "n0", "gone")])
    assert rates == egress_rates("fair", two_racks(), [])


@pytest.mark.parametrize("policy", ALLOCATORS)
def test_every_policy_keeps_the_shared_links_within_capacity(policy: str) -> None:
    # The simulator's effective rates credit a neighbour's compute time and could
    # exceed the uplink together; the rates to enforce are those with every coflow
    # in flight, so they do not, but for job_rates's floor: a job a priority policy
    # holds back (b, behind a under SEBF) keeps 1e-3 of its rate alone.
    rates = egress_rates(policy, two_racks(), [running("a", "n0", "n2"), running("b", "n1", "n3")])
    floor_gbps = 1e-3 * SLOW_NIC_GBPS
    assert rates.job_gbps["a"] + rates.job_gbps["b"] <= UPLINK_GBPS + floor_gbps + 1e-6
    assert floor_gbps - 1e-6 <= rates.job_gbps["b"] <= SLOW_NIC_GBPS + 1e-6
    assert rates.job_gbps["a"] >= UPLINK_GBPS - SLOW_NIC_GBPS - 1e-6


def test_an_unknown_network_is_refused_and_dedicated_publishes_nothing() -> None:
    writer: Any = object()
    with pytest.raises(UnknownNetworkError, match="known: dedicated, fair"):
        make_publisher("fastest", writer)
    assert make_publisher("dedicated", writer) is None


# --- the operator on the control plane -------------------------------------------------

# make_node_body's DGX-1 V100 preset has a 400 Gbit/s NIC (controller/presets).
DGX1_NIC_GBPS = 400.0


def pod_rates(api: KubeApi, job: str) -> dict[str, str | None]:
    return {
        p["spec"]["nodeName"]: (p["metadata"].get("annotations") or {}).get(crd.ANN_EGRESS_GBPS)
        for p in job_pods(api, job)
        if not p["metadata"].get("deletionTimestamp")
    }


def bandwidth(api: KubeApi, job: str) -> float | None:
    value = (api.get_dljob("default", job).get("status") or {}).get("bandwidthGbps")
    return None if value is None else float(value)


@pytest.mark.parametrize("gpu_cluster", [4], indirect=True)
def test_operator_publishes_rates_on_pods_and_status(gpu_cluster: Any) -> None:
    api: KubeApi = gpu_cluster.api
    for i in (2, 3):  # node-0, node-1 in rack r0; node-2, node-3 in r1
        api.patch_node(f"node-{i}", {"metadata": {"labels": {crd.LABEL_RACK: "r1"}}})
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, network="fair", placement="first-fit") as op:
            # 12 GPUs each, placed first-fit: a takes node-0 and half of node-1, b the
            # rest of node-1 and node-2; their rings both cross node-1's NIC each way.
            api.create_dljob("default", make_dljob("a", gpus=12, duration_s=60))
            wait_phases(api, "Running", ["a"])
            api.create_dljob("default", make_dljob("b", gpus=12, duration_s=3))
            wait_phases(api, "Running", ["a", "b"])
            assert sorted(pod_rates(api, "a")) == ["node-0", "node-1"]
            assert sorted(pod_rates(api, "b")) == ["node-1", "node-2"]
            half = repr(DGX1_NIC_GBPS / 2)
            wait_for("shared rates", lambda: set(pod_rates(api, "a").values()) == {half})
            assert set(pod_rates(api, "b").values()) == {half}
            assert bandwidth(api, "a") == bandwidth(api, "b") == DGX1_NIC_GBPS / 2

            # Nothing changes: no write in the next rounds.
            writes = op.backend.writer.writes
            rounds = op.rounds
            wait_for("three rounds", lambda: op.rounds >= rounds + 3)
            assert op.backend.writer.writes == writes

            # b finishes: a has node-1's NIC to itself again.
            wait_phases(api, "Succeeded", ["b"])
            full = repr(DGX1_NIC_GBPS)
            wait_for("a's full rate", lambda: set(pod_rates(api, "a").values()) == {full})
            wait_for("a's status", lambda: bandwidth(api, "a") == DGX1_NIC_GBPS)
    finally:
        kubelet.stop()


@pytest.mark.parametrize("gpu_cluster", [4], indirect=True)
def test_the_agent_reports_what_the_operator_asks_of_its_node(gpu_cluster: Any) -> None:
    api: KubeApi = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    stop = threading.Event()
    # Report only: this test runs no tc (tests/operators/agent/test_agent_netns.py does).
    # The agent publishes node-0 with a 200 Gbit/s NIC, the slowest of the job's ring.
    nic_gbps = 200.0
    options = AgentOptions(
        node_name="node-0", nic_gbps=nic_gbps, interval_s=0.5, enforce_bandwidth=False
    )
    nvml = FakeNvml()
    nvml.nvmlInit()
    agent = threading.Thread(target=run_agent, args=(options,), daemon=True,
                             kwargs={"nvml": nvml, "api": api, "stop": stop})  # fmt: skip
    agent.start()
    try:
        with running_operator(gpu_cluster.client, network="fair"):
            api.create_dljob("default", make_dljob("a", gpus=16, duration_s=60))
            wait_phases(api, "Running", ["a"])
            pod = next(p for p in job_pods(api, "a") if p["spec"]["nodeName"] == "node-0")
            want = {f"default/{pod['metadata']['name']}": nic_gbps}

            def applied() -> dict[str, float] | None:
                ann = api.get_node("node-0")["metadata"].get("annotations") or {}
                doc = json.loads(ann.get(crd.ANN_NODE_EGRESS_APPLIED) or "{}")
                return doc if doc == want else None

            wait_for("the agent's report", applied)
            ann = api.get_node("node-0")["metadata"]["annotations"]
            assert crd.ANN_NODE_EGRESS_ERROR not in ann
    finally:
        stop.set()
        agent.join(timeout=5)
        kubelet.stop()
