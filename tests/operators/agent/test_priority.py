"""Classes that borrow: a pod's floor and priority level (the phase networks, issue 19),
with a stand-in for tc, then on a real veth measured with iperf3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, cast

import pytest

from operators import crd
from operators.agent.bandwidth import BandwidthEnforcer, PodRate
from operators.agent.egress import EgressAgent, wanted_rates
from operators.agent.htb import HTB_MAX_PRIO, parse_classes
from operators.kube import KubeApi
from tests.operators.agent.fake_tc import FakeTc
from tests.operators.agent.netns import POD_IP, Iperf, Link, needs_netns, received_gbps

NODE = "node-0"


def phase_pod(name: str, ip: str, ann: dict[str, str]) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "annotations": ann}
    spec = {"nodeName": NODE, "containers": [{"name": "worker", "image": "x"}]}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running", "podIP": ip}}


def annotations(ceil: float, floor: float | None, level: int | None) -> dict[str, str]:
    ann = {crd.ANN_EGRESS_GBPS: repr(ceil)}
    if floor is not None:
        ann[crd.ANN_EGRESS_FLOOR_GBPS] = repr(floor)
    if level is not None:
        ann[crd.ANN_NET_PRIORITY] = str(level)
    return ann


class NodePatches:
    """Records the agent's Node patches."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        assert name == NODE
        self.patches.append(patch["metadata"]["annotations"])
        return patch


# --- with a stand-in for tc --------------------------------------------------------


def test_the_pods_floor_and_level_are_read_from_their_annotations() -> None:
    pods = [
        phase_pod("a", "10.0.0.1", annotations(0.2, 0.002, 3)),
        phase_pod("b", "10.0.0.2", annotations(0.2, 0.1, None)),
        phase_pod("c", "10.0.0.3", annotations(0.2, None, None)),
        phase_pod("bad-level", "10.0.0.4", annotations(0.2, 0.002, HTB_MAX_PRIO + 1)),
        phase_pod("bad-floor", "10.0.0.5", annotations(0.2, 0.3, 1)),
    ]
    assert wanted_rates(pods) == [
        PodRate("default/a", "10.0.0.1", 0.2, floor_gbps=0.002, priority=3),
        PodRate("default/b", "10.0.0.2", 0.2, floor_gbps=0.1),
        PodRate("default/c", "10.0.0.3", 0.2),
    ]


def test_a_level_becomes_the_class_prio_and_a_floor_its_rate() -> None:
    tc = FakeTc()
    enf = BandwidthEnforcer("eth0", leaf_qdisc=None, runner=tc)
    enf.apply([PodRate("a", "10.0.0.1", 0.2, floor_gbps=0.002, priority=3)])
    cls = next(c for c in tc.calls if "classid" in c and c[c.index("classid") + 1] == "1:2")
    assert cls[cls.index("rate") + 1] == "2000000bit"
    assert cls[cls.index("ceil") + 1] == "200000000bit"
    assert cls[cls.index("prio") + 1] == str(HTB_MAX_PRIO - 3)
    tc.calls.clear()
    enf.apply([PodRate("a", "10.0.0.1", 0.2, floor_gbps=0.002, priority=3)])
    assert tc.verbs() == []
    enf.apply([PodRate("a", "10.0.0.1", 0.2, floor_gbps=0.002, priority=1)])
    assert tc.verbs() == ["class change"]
    assert tc.calls[-1][tc.calls[-1].index("prio") + 1] == str(HTB_MAX_PRIO - 1)
    tc.calls.clear()
    enf.apply([PodRate("a", "10.0.0.1", 0.2)])  # the phase network is gone: rate = ceil
    assert tc.verbs() == ["class change"]
    assert "prio" not in tc.calls[-1]


def test_kernel_classes_parse_with_ceil_and_prio() -> None:
    text = (
        "class htb 1:1 root rate 200Mbit ceil 200Mbit burst 1600b cburst 1600b \n"
        "class htb 1:2 parent 1:1 leaf 2: prio 6 rate 2Mbit ceil 200Mbit burst 1600b \n"
    )
    got = parse_classes(text)
    assert got["1:2"].rate_gbps == pytest.approx(0.002)
    assert got["1:2"].ceil_gbps == pytest.approx(0.2)
    assert (got["1:1"].prio, got["1:2"].prio) == (0, 6)


def test_the_agent_reports_floors_and_levels_and_withdraws_them() -> None:
    api = NodePatches()
    tc = FakeTc()
    make = lambda: BandwidthEnforcer("eth0", leaf_qdisc=None, runner=tc)  # noqa: E731
    agent = EgressAgent(cast(KubeApi, api), NODE, make)
    pods = [
        phase_pod("a", "10.0.0.1", annotations(0.2, 0.002, 1)),
        phase_pod("b", "10.0.0.2", annotations(0.2, 0.002, 0)),
    ]
    agent.step(pods)
    report = api.patches[-1]
    assert json.loads(report[crd.ANN_NODE_EGRESS_APPLIED]) == {"default/a": 0.2, "default/b": 0.2}
    assert json.loads(report[crd.ANN_NODE_EGRESS_CLASSES]) == {
        "default/a": {"floor_gbps": 0.002, "priority": 1},
        "default/b": {"floor_gbps": 0.002, "priority": 0},
    }
    agent.step(pods)
    assert len(api.patches) == 1  # unchanged: no patch
    agent.step([phase_pod("a", "10.0.0.1", annotations(0.2, None, None))])
    assert api.patches[-1][crd.ANN_NODE_EGRESS_CLASSES] is None  # removed


# --- on a real veth, measured with iperf3 ------------------------------------------

LINK_GBPS = 0.2  # the device's link class: slow enough to be the bottleneck of two flows
TOLERANCE = 0.15  # the agent tests' bound on |measured - expected| / expected
MEASURE_S = 4


@pytest.fixture
def slow_link(link: Link) -> Iterator[BandwidthEnforcer]:
    enf = BandwidthEnforcer(
        link.client_dev, netns=link.client_ns, link_rate_gbps=LINK_GBPS, leaf_qdisc=None
    )
    try:
        yield enf
    finally:
        enf.clear()


def measure(link: Link, pods: list[str], port: int) -> dict[str, float]:
    with ExitStack() as stack:
        runs = {
            k: stack.enter_context(Iperf(link, POD_IP[k], port + i, MEASURE_S, 1))
            for i, k in enumerate(pods)
        }
        return {k: received_gbps(run.result()) for k, run in runs.items()}


@pytest.mark.netns
@needs_netns
def test_the_higher_level_takes_the_link_and_the_lower_keeps_its_floor(
    link: Link, slow_link: BandwidthEnforcer
) -> None:
    floor = LINK_GBPS * 0.01
    slow_link.apply(
        [
            PodRate("pod-a", POD_IP["pod-a"], LINK_GBPS, floor_gbps=floor, priority=1),
            PodRate("pod-b", POD_IP["pod-b"], LINK_GBPS, floor_gbps=floor, priority=0),
        ]
    )
    held = slow_link.current_classes()
    assert (held["pod-a"].prio, held["pod-b"].prio) == (HTB_MAX_PRIO - 1, HTB_MAX_PRIO)
    assert held["pod-a"].rate_gbps == pytest.approx(floor, rel=1e-2)
    got = measure(link, ["pod-a", "pod-b"], 5341)
    print(f"link {LINK_GBPS} Gbit/s, levels 1 / 0: measured {got}")
    # TCP over Ethernet carries at most ~96 % of the shaped rate (docs/bandwidth.md).
    assert got["pod-a"] >= (1 - TOLERANCE) * LINK_GBPS
    assert got["pod-b"] <= TOLERANCE * LINK_GBPS
    assert got["pod-b"] > 0.0  # the floor: the low level is not starved


@pytest.mark.netns
@needs_netns
def test_equal_floors_share_the_link_and_one_alone_borrows_all_of_it(
    link: Link, slow_link: BandwidthEnforcer
) -> None:
    half = LINK_GBPS / 2
    slow_link.apply(
        [
            PodRate("pod-a", POD_IP["pod-a"], LINK_GBPS, floor_gbps=half),
            PodRate("pod-b", POD_IP["pod-b"], LINK_GBPS, floor_gbps=half),
        ]
    )
    both = measure(link, ["pod-a", "pod-b"], 5351)
    alone = measure(link, ["pod-a"], 5361)
    print(f"link {LINK_GBPS} Gbit/s, floors {half}: together {both}, a alone {alone}")
    for k in ("pod-a", "pod-b"):
        assert both[k] == pytest.approx(half, rel=TOLERANCE), k
    assert alone["pod-a"] == pytest.approx(LINK_GBPS, rel=TOLERANCE)
