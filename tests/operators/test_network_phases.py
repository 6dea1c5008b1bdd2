"""The phase networks live: the operator's slots (cassini) and levels (crux) on pods."""

from __future__ import annotations

from typing import Any

import pytest

from controller.model import Allocation, GpuShare
from controller.network.phases.crux import PRIORITY_FLOOR
from controller.network.phases.slots import SLOT_HEADROOM
from controller.rates import RateModel
from operators import crd
from operators.kube import KubeApi
from operators.network import RunningJob, UnknownNetworkError
from operators.network.phases import (
    NetworkedJob,
    check_live_network,
    make_network_publisher,
    pod_annotations,
)
from tests.builders import make_cluster, make_job
from tests.operators.builders import make_dljob
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.waiting import wait_for

# --- the pure computation -----------------------------------------------------------

CLUSTER = make_cluster(nodes=3, gpus=4)  # 100 Gbit/s NICs


def networked(job_id: str, *nodes: int) -> NetworkedJob:
    shares = tuple(GpuShare(n, g) for n in nodes for g in range(4))
    alloc = Allocation(shares)
    names = tuple(CLUSTER.nodes[n].name for n in nodes)
    pods = tuple(f"default/{job_id}-1-{rank}" for rank in range(len(nodes)))
    spec = make_job(job_id, gpus=4 * len(nodes), model="resnet50")
    running = RunningJob(job_id, names, pods, RateModel(CLUSTER).profile(spec).grad_mib)
    return NetworkedJob(running, spec, alloc, None, alloc.num_gpus, 0.0)


def test_cassini_gives_two_jobs_on_one_nic_slots_half_a_period_apart() -> None:
    jobs = [networked("a", 0, 1), networked("b", 1, 2)]  # both cross node 1's NIC
    ann = pod_annotations("cassini", CLUSTER, jobs, RateModel(CLUSTER))
    assert sorted(ann) == [f"default/{j}-1-{r}" for j in "ab" for r in (0, 1)]
    a, b = ann["default/a-1-0"], ann["default/b-1-0"]
    assert ann["default/a-1-1"] == a and ann["default/b-1-1"] == b
    period = float(a[crd.ANN_COMM_PERIOD_S] or "nan")
    assert b[crd.ANN_COMM_PERIOD_S] == a[crd.ANN_COMM_PERIOD_S]
    gap = float(b[crd.ANN_COMM_OFFSET_S] or "nan") - float(a[crd.ANN_COMM_OFFSET_S] or "nan")
    assert gap % period == pytest.approx(period / 2, abs=2e-3)
    # The slot covers the iteration alone (resnet50 on 8 GPUs) with the headroom.
    rates = RateModel(CLUSTER)
    alone_s = 1.0 / rates.rate_ips(jobs[0].spec, jobs[0].allocation, inter_node_gbps=100.0)
    assert period == pytest.approx(alone_s * (1 + SLOT_HEADROOM), abs=1e-3)
    # Each may use the whole NIC in its turn and is guaranteed its fair half.
    assert a[crd.ANN_EGRESS_GBPS] == "100.0" and a[crd.ANN_EGRESS_FLOOR_GBPS] == "50.0"
    assert a[crd.ANN_NET_PRIORITY] is None


def test_a_job_alone_has_no_slot_and_its_whole_link() -> None:
    ann = pod_annotations("cassini", CLUSTER, [networked("a", 0, 1)], RateModel(CLUSTER))
    assert ann["default/a-1-0"] == {
        crd.ANN_EGRESS_GBPS: "100.0",
        crd.ANN_EGRESS_FLOOR_GBPS: "100.0",
        crd.ANN_COMM_PERIOD_S: None,
        crd.ANN_COMM_OFFSET_S: None,
        crd.ANN_NET_PRIORITY: None,
    }


def test_crux_gives_levels_over_a_small_floor() -> None:
    # b's 8 GPUs compute as long as a's 4 per iteration on half the gradient's bytes:
    # same model, so the 2-node jobs' intensities differ by their GPU counts.
    a, b = networked("a", 0, 1), networked("b", 1, 2)
    small = NetworkedJob(
        a.running, make_job("a", gpus=4, model="resnet50"), a.allocation, None, 4, 0.0
    )
    ann = pod_annotations("crux", CLUSTER, [small, b], RateModel(CLUSTER))
    levels = {j: int(ann[f"default/{j}-1-0"][crd.ANN_NET_PRIORITY] or "-1") for j in "ab"}
    assert levels["b"] > levels["a"] >= 0
    assert ann["default/a-1-0"][crd.ANN_EGRESS_FLOOR_GBPS] == repr(100.0 * PRIORITY_FLOOR)
    assert ann["default/a-1-0"][crd.ANN_COMM_PERIOD_S] is None


def test_networks_the_operator_cannot_run_are_refused_in_one_line() -> None:
    with pytest.raises(UnknownNetworkError, match="'mltcp' has no live form"):
        check_live_network("mltcp")
    with pytest.raises(UnknownNetworkError, match=r"known: dedicated, fair.*cassini, crux"):
        check_live_network("fastest")
    assert make_network_publisher("dedicated", object()) is None  # type: ignore[arg-type]
    assert check_live_network("cassini") == "cassini"


# --- the operator on the control plane -------------------------------------------------

DGX1_NIC_GBPS = 400.0  # make_node_body's DGX-1 V100 preset


def pod_annotation(api: KubeApi, job: str, name: str) -> dict[str, str | None]:
    return {
        p["spec"]["nodeName"]: (p["metadata"].get("annotations") or {}).get(name)
        for p in job_pods(api, job)
        if not p["metadata"].get("deletionTimestamp")
    }


def slot(api: KubeApi, job: str) -> tuple[float, float] | None:
    periods = set(pod_annotation(api, job, crd.ANN_COMM_PERIOD_S).values())
    offsets = set(pod_annotation(api, job, crd.ANN_COMM_OFFSET_S).values())
    if len(periods) != 1 or len(offsets) != 1 or None in periods | offsets:
        return None
    return float(periods.pop() or "nan"), float(offsets.pop() or "nan")


@pytest.mark.parametrize("gpu_cluster", [4], indirect=True)
def test_operator_publishes_slots_and_withdraws_them_when_a_job_leaves(gpu_cluster: Any) -> None:
    api: KubeApi = gpu_cluster.api
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client, network="cassini", placement="first-fit") as op:
            # 12 GPUs each, first fit: a on node-0 + half of node-1, b on the rest of
            # node-1 + node-2; both rings cross node-1's NIC each way.
            api.create_dljob("default", make_dljob("a", gpus=12, duration_s=60))
            wait_phases(api, "Running", ["a"])
            full = repr(DGX1_NIC_GBPS)
            wait_for(
                "a's rate",
                lambda: set(pod_annotation(api, "a", crd.ANN_EGRESS_GBPS).values()) == {full},
            )
            assert slot(api, "a") is None  # alone: no slot
            api.create_dljob("default", make_dljob("b", gpus=12, duration_s=3))
            wait_phases(api, "Running", ["a", "b"])
            wait_for("both slots", lambda: slot(api, "a") and slot(api, "b"))
            (pa, oa), (pb, ob) = slot(api, "a") or (0, 0), slot(api, "b") or (0, 0)
            assert pa == pb > 0
            assert (ob - oa) % pa == pytest.approx(pa / 2, abs=2e-3)
            half = repr(DGX1_NIC_GBPS / 2)
            for job in ("a", "b"):
                assert set(pod_annotation(api, job, crd.ANN_EGRESS_FLOOR_GBPS).values()) == {half}
                assert set(pod_annotation(api, job, crd.ANN_EGRESS_GBPS).values()) == {full}
                status = api.get_dljob("default", job).get("status") or {}
                assert status.get("bandwidthGbps") == DGX1_NIC_GBPS

            # Nothing changes: no write in the next rounds.
            writes, rounds = op.backend.writer.writes, op.rounds
            wait_for("three rounds", lambda: op.rounds >= rounds + 3)
            assert op.backend.writer.writes == writes

            # b finishes: a's slot goes, and its floor is the whole NIC again.
            wait_phases(api, "Succeeded", ["b"])
            wait_for(
                "a's slot withdrawn",
                lambda: set(pod_annotation(api, "a", crd.ANN_COMM_PERIOD_S).values()) == {None},
            )
            assert set(pod_annotation(api, "a", crd.ANN_COMM_OFFSET_S).values()) == {None}
            assert set(pod_annotation(api, "a", crd.ANN_EGRESS_FLOOR_GBPS).values()) == {full}
    finally:
        kubelet.stop()
