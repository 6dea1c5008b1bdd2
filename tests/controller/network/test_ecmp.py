"""ECMP lanes (controller.network.ecmp) and Crux's path selection over them
(controller.network.phases.crux_paths, through the phase model)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from controller.model import Allocation, Cluster, Rack
from controller.model.catalog import resolve
from controller.model.perf import iteration_time_s
from controller.network.ecmp import hashed_path
from controller.network.jobs import NetJob, link_capacity, ring_flows
from controller.network.loads import JobTraffic, link_loads
from controller.network.phases.crux_paths import select_paths
from controller.network.phases.jobs import phase_job_rates
from controller.network.registry import phase_form
from controller.placement import FirstFitPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import ClusterSpecError, load_cluster, named_cluster
from controller.spec.clos import Tor, clos_cluster
from controller.spec.yaml_spec import presets
from policies.registry import make_policy
from tests.builders import make_job

NIC_GBPS = 25.0  # pcie4 hosts


def _two_racks(lanes: int) -> Cluster:
    """One group of two ToRs of two pcie4 hosts each (nodes 0, 1 | 2, 3), ToRs 1:1:
    an uplink of 50 Gbit/s, in `lanes` lanes."""
    tors = [Tor("t0", 0, ("h0", "h1")), Tor("t1", 0, ("h2", "h3"))]
    return clos_cluster(
        f"two-racks/{lanes}",
        presets()[1]["pcie4"],
        ["g0"],
        tors,
        tor_oversubscription=1.0,
        group_oversubscription=1.0,
        lanes=lanes,
    )


def _lanes_of(cluster: Cluster, job: NetJob) -> list[object]:
    return [link[1] for f in ring_flows(cluster, job) for link in f.links if link[0] == "rack-up"]


def test_a_tier_of_lanes_splits_its_capacity_and_names_each_lane() -> None:
    cluster = _two_racks(2)
    assert cluster.has_lanes and not _two_racks(1).has_lanes
    links = {link for f in ring_flows(cluster, NetJob("j", (0, 2), 10.0)) for link in f.links}
    racks = sorted(link for link in links if link[0].startswith("rack"))
    assert [kind for kind, _ in racks] == ["rack-down", "rack-down", "rack-up", "rack-up"]
    for link in racks:
        assert isinstance(link[1], str) and link[1].split(":")[1] in ("0", "1")
        assert link_capacity(cluster, link) == pytest.approx(50.0 / 2)
    # one lane: the summed link, named by its index alone, as before lanes existed
    plain = {link for f in ring_flows(_two_racks(1), NetJob("j", (0, 2), 10.0)) for link in f.links}
    assert ("rack-up", 0) in plain and link_capacity(_two_racks(1), ("rack-up", 0)) == 50.0


def test_hashing_is_stable_and_spreads_flows_over_the_lanes() -> None:
    assert hashed_path("job-7", 3, 9) == hashed_path("job-7", 3, 9)
    assert hashed_path("job-7", 3, 9) != hashed_path("job-7", 9, 3)
    cluster = _two_racks(4)
    counts = Counter(
        lane for i in range(400) for lane in _lanes_of(cluster, NetJob(f"j{i}", (0, 2), 1.0))
    )
    assert set(counts) == {"0:0", "0:1", "0:2", "0:3", "1:0", "1:1", "1:2", "1:3"}
    # 800 flows up, 100 a lane on average; a stuck or skewed hash would fail this
    assert all(60 <= n <= 140 for n in counts.values()), counts


def _colliding_pair(cluster: Cluster) -> tuple[NetJob, NetJob]:
    """Two jobs across the two ToRs whose hashed flows share every lane."""
    b = NetJob("b", (1, 3), grad_mib=500.0)
    for i in itertools.count():
        a = NetJob(f"a{i}", (0, 2), grad_mib=500.0)
        if _lanes_of(cluster, a) == _lanes_of(cluster, b):
            return a, b
    raise AssertionError("unreachable")


def test_crux_routes_jobs_that_ecmp_made_collide_onto_lanes_of_their_own() -> None:
    cluster = _two_racks(2)
    a, b = _colliding_pair(cluster)
    allocs = {
        j.job_id: Allocation.whole([(n, g) for n in j.nodes for g in range(4)]) for j in (a, b)
    }

    def iteration_s(job_id: str, gbps: float) -> float:
        return iteration_time_s(resolve("vgg16"), cluster, allocs[job_id], inter_node_gbps=gbps)

    fair = phase_job_rates(phase_form("fair"), cluster, [a, b], iteration_s, now_s=0.0)
    crux = phase_job_rates(phase_form("crux"), cluster, [a, b], iteration_s, now_s=0.0)
    # Alone, each ring runs at its NIC (a lane is as fast); hashed onto the same lanes
    # the pair contends there under fair sharing; routed, neither shares a link.
    assert all(rate < 0.9 * NIC_GBPS for rate in fair.values()), fair
    assert crux == pytest.approx({a.job_id: NIC_GBPS, "b": NIC_GBPS})
    paths = select_paths(cluster, [a, b], [a.job_id, b.job_id], {a.job_id: 1.0, b.job_id: 1.0})
    assert paths[a.job_id] == [(0, 0), (0, 0)] and paths[b.job_id] == [(1, 0), (1, 0)]


def test_path_selection_goes_by_intensity_and_fills_the_emptiest_lane() -> None:
    cluster = _two_racks(2)
    jobs = [NetJob("x", (0, 2), 10.0), NetJob("y", (1, 3), 10.0), NetJob("z", (0, 3), 10.0)]
    # x routes first (most intense) and takes lane 0; y lane 1; z, last, shares the
    # lane whose wire time is smaller: y's, whose burst is the smaller
    bursts = {"x": 4.0, "y": 1.0, "z": 2.0}
    paths = select_paths(cluster, jobs, ["x", "y", "z"], bursts)
    assert [paths[j][0][0] for j in ("x", "y", "z")] == [0, 1, 1]
    assert paths["z"][1] == paths["z"][0]  # back the same way: lane 1 is still emptier
    bursts["y"] = 8.0
    paths = select_paths(cluster, jobs, ["x", "y", "z"], bursts)
    assert [paths[j][0][0] for j in ("x", "y", "z")] == [0, 1, 0]


def test_link_loads_show_each_lane() -> None:
    cluster = _two_racks(2)
    a, b = _colliding_pair(cluster)
    loads = link_loads(cluster, [JobTraffic(j.job_id, j.nodes, 5.0) for j in (a, b)])
    lanes = [load for load in loads if load.kind == "rack-up"]
    assert {load.where.rsplit("/", 1)[0] for load in lanes} == {"t0", "t1"}
    assert all(load.jobs == 2 and load.capacity_gbps == 25.0 for load in lanes)


def test_lanes_are_named_and_checked() -> None:
    c = load_cluster("clos:2x2x2/ecmp4")
    assert [r.uplinks for r in c.racks] == [4] * 4 and [g.uplinks for g in c.groups] == [4, 4]
    assert named_cluster("lingjun/ecmp8").racks[0].uplinks == 8
    assert named_cluster("lingjun").racks[0].uplinks == 1
    for bad in ("clos:2x2x2/ecmp0", "lingjun/ecmp65"):
        with pytest.raises(ClusterSpecError, match=r"lanes must be in 1\.\.64"):
            named_cluster(bad)
    with pytest.raises(ValueError, match="uplinks must be >= 1"):
        Cluster("bad", (), (Rack("r", 10.0, uplinks=0),))


@pytest.mark.parametrize("network", ["fair", "crux", "cassini"])
def test_a_lone_job_on_lanes_gets_the_steady_models_time(network: str) -> None:
    cluster = _two_racks(2)  # a 16-GPU ring crosses both ToRs, one lane each way
    jobs = [make_job("a", 16, duration_s=700, model="vgg16")]

    def finish(net: str, model: str) -> float | None:
        cfg = SimConfig(round_interval_s=0.0, check_plans=True, network=net, network_model=model)
        sim = Simulator(cluster, jobs, make_policy("fifo"), FirstFitPlacer(cluster), cfg)
        (outcome,) = sim.run().jobs
        return outcome.finish_s

    assert finish(network, "phases") == finish("fair", "steady") == pytest.approx(700.0)
