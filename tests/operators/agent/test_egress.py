"""The agent's egress loop: which pods it shapes, what it reports and how often (with
a stand-in for tc), then the agent itself on a real veth, measured with iperf3."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, cast

import kubernetes  # type: ignore[import-untyped]

from operators import crd
from operators.agent.bandwidth import BandwidthEnforcer
from operators.agent.egress import EgressAgent, default_route_interface, wanted_rates
from operators.agent.main import AgentOptions, run_agent
from operators.kube import KubeApi
from operators.kube.calls import drain
from tests.operators.agent.fake_tc import FakeTc
from tests.operators.agent.netns import (
    LINK_RATE_GBPS,
    POD_IP,
    Iperf,
    Link,
    assert_within,
    needs_netns,
    received_gbps,
    sh,
)
from tests.operators.fake_nvml import FakeNvml
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

NODE = "node-0"


def make_pod(
    name: str,
    gbps: str | None,
    ip: str | None = "10.0.0.1",
    *,
    phase: str = "Running",
    host_network: bool = False,
) -> dict[str, Any]:
    ann = {} if gbps is None else {crd.ANN_EGRESS_GBPS: gbps}
    spec: dict[str, Any] = {"nodeName": NODE, "containers": [{"name": "worker", "image": "x"}]}
    if host_network:
        spec["hostNetwork"] = True
    status: dict[str, Any] = {"phase": phase}
    if ip is not None:
        status["podIP"] = ip
    meta = {"name": name, "namespace": "default", "annotations": ann}
    return {"metadata": meta, "spec": spec, "status": status}


class FakeApi:
    """Records Node patches."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        assert name == NODE
        self.patches.append(patch["metadata"]["annotations"])
        return patch


def agent_with(tc: FakeTc | None) -> tuple[EgressAgent, FakeApi]:
    api = FakeApi()
    make: Callable[[], BandwidthEnforcer] | None = None
    if tc is not None:
        make = lambda: BandwidthEnforcer("eth0", leaf_qdisc=None, runner=tc)  # noqa: E731
    return EgressAgent(cast(KubeApi, api), NODE, make), api


def applied(patch: dict[str, Any]) -> dict[str, float]:
    doc: dict[str, float] = json.loads(patch[crd.ANN_NODE_EGRESS_APPLIED])
    return doc


def test_only_pods_with_a_rate_an_ip_of_their_own_and_alive_are_shaped() -> None:
    pods = [
        make_pod("ok", "0.2", "10.0.0.1"),
        make_pod("pending-ip", "0.2", None),
        make_pod("no-rate", None, "10.0.0.3"),
        make_pod("host", "0.2", "192.168.1.5", host_network=True),
        make_pod("done", "0.2", "10.0.0.4", phase="Succeeded"),
        make_pod("garbled", "fast", "10.0.0.5"),
        make_pod("zero", "0", "10.0.0.6"),
    ]
    rates = wanted_rates(pods)
    assert [(r.pod_key, r.ip, r.rate_gbps) for r in rates] == [("default/ok", "10.0.0.1", 0.2)]


def test_no_pod_to_shape_leaves_the_device_alone_and_reports_once() -> None:
    tc = FakeTc()
    agent, api = agent_with(tc)
    agent.step([make_pod("no-rate", None)])
    agent.step([])
    assert tc.calls == []
    assert [applied(p) for p in api.patches] == [{}]


def test_rates_are_applied_and_reported_once_per_change() -> None:
    tc = FakeTc()
    agent, api = agent_with(tc)
    two = [make_pod("a", "0.2", "10.0.0.1"), make_pod("b", "0.05", "10.0.0.2")]
    agent.step(two)
    assert tc.verbs()[0] == "qdisc replace" and tc.verbs().count("filter add") == 2
    assert applied(api.patches[-1]) == {"default/a": 0.2, "default/b": 0.05}
    assert api.patches[-1][crd.ANN_NODE_EGRESS_ERROR] is None  # merge patch: removed
    tc.calls.clear()
    agent.step(list(reversed(two)))
    assert tc.calls == [] and len(api.patches) == 1
    agent.step([make_pod("a", "0.1", "10.0.0.1")])  # b gone, a slowed down
    assert tc.verbs() == ["filter del", "class del", "class change"]
    assert applied(api.patches[-1]) == {"default/a": 0.1}


def test_a_tc_failure_is_reported_once_and_retried_until_it_works() -> None:
    shown = "class htb 1:2 parent 1:1 leaf 2: prio 0 rate 200Mbit ceil 200Mbit burst 131072b\n"
    tc = FakeTc(class_show=shown)
    agent, api = agent_with(tc)
    pods = [make_pod("a", "0.2", "10.0.0.1")]
    tc.fail_on = "filter"
    agent.step(pods)
    agent.step(pods)  # retried, fails the same way: no second report
    assert len(api.patches) == 1
    assert "tc: Error: boom" in api.patches[0][crd.ANN_NODE_EGRESS_ERROR]
    # What the kernel holds after the failure: a's class was added before its filter.
    assert applied(api.patches[0]) == {"default/a": 0.2}
    tc.fail_on = None
    tc.calls.clear()
    agent.step(pods)
    assert tc.verbs()[0] == "qdisc replace"  # the tree is rebuilt after a failure
    assert api.patches[-1][crd.ANN_NODE_EGRESS_ERROR] is None
    assert applied(api.patches[-1]) == {"default/a": 0.2}


def test_report_only_runs_no_tc() -> None:
    agent, api = agent_with(None)
    agent.step([make_pod("a", "0.2", "10.0.0.1")])
    assert applied(api.patches[-1]) == {"default/a": 0.2}


def test_the_default_route_names_the_interface() -> None:
    routes = [{"dst": "default", "gateway": "10.0.0.1", "dev": "ens5", "flags": []}]
    calls: list[list[str]] = []

    def ip(argv: list[str]) -> str:
        calls.append(argv)
        return json.dumps(routes)

    assert default_route_interface("ns1", runner=ip) == "ens5"
    assert calls == [["ip", "-netns", "ns1", "-j", "route", "show", "default"]]


# --- the agent on a real veth ----------------------------------------------------------


def create_running_pod(core: Any, name: str, gbps: float, ip: str) -> None:
    body = make_pod(name, repr(gbps), ip)
    status = body.pop("status")
    drain(core.create_namespaced_pod("default", body, _preload_content=False))
    pod = json.loads(core.read_namespaced_pod(name, "default", _preload_content=False).data)
    pod["status"] = status  # what the kubelet reports once the sandbox is up
    drain(core.replace_namespaced_pod_status(name, "default", pod, _preload_content=False))


def node_applied(api: KubeApi) -> dict[str, float]:
    ann = api.get_node(NODE)["metadata"].get("annotations") or {}
    doc: dict[str, float] = json.loads(ann.get(crd.ANN_NODE_EGRESS_APPLIED) or "{}")
    return doc


def pod_classes(link: Link) -> set[str]:
    out = sh("tc", "-netns", link.client_ns, "class", "show", "dev", link.client_dev)
    return set(re.findall(r"class htb (\S+)", out)) - {"1:1", "1:ffff"}


@needs_netns
def test_the_agent_shapes_each_pod_to_its_rate_and_drops_a_deleted_one(
    link: Link, kube_cluster: RealCluster
) -> None:
    api = kube_cluster.api
    core = kubernetes.client.CoreV1Api(api.client)
    api.create_node({"metadata": {"name": NODE}})
    rates = {"pod-a": 0.2, "pod-b": 0.05}
    for name, gbps in rates.items():
        create_running_pod(core, name, gbps, POD_IP[name])
    nvml = FakeNvml()
    nvml.nvmlInit()
    options = AgentOptions(
        node_name=NODE,
        nic_gbps=LINK_RATE_GBPS,
        interval_s=0.5,
        interface=link.client_dev,
        netns=link.client_ns,
        leaf_qdisc=link.leaf_qdisc or "pfifo",
    )
    stop = threading.Event()
    agent = threading.Thread(target=run_agent, args=(options,), daemon=True,
                             kwargs={"nvml": nvml, "api": api, "stop": stop})  # fmt: skip
    agent.start()
    try:
        want = {f"default/{k}": r for k, r in rates.items()}
        wait_for("both pods applied", lambda: node_applied(api) == want)
        assert len(pod_classes(link)) == 2
        with ExitStack() as stack:
            runs = {
                k: stack.enter_context(Iperf(link, POD_IP[k], 5311 + i, 3, 1))
                for i, k in enumerate(rates)
            }
            measured = {k: received_gbps(run.result()) for k, run in runs.items()}
        print(f"agent: assigned {rates} measured {measured}")
        for k, r in rates.items():
            assert_within(measured[k], r, k)

        core.delete_namespaced_pod("pod-b", "default", grace_period_seconds=0)
        wait_for("pod-b dropped", lambda: node_applied(api) == {"default/pod-a": 0.2})
        assert len(pod_classes(link)) == 1  # pod-b's class is gone, pod-a's stays
    finally:
        stop.set()
        agent.join(timeout=5)
        clear_tree(link)


def clear_tree(link: Link) -> None:
    """Remove the agent's tree (the agent leaves it in place when it stops)."""
    sh("tc", "-netns", link.client_ns, "qdisc", "del", "dev", link.client_dev, "root")
