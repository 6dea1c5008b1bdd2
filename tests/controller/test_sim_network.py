"""Multi-node jobs sharing NICs and rack uplinks in replay (controller.network.jobs)."""

from __future__ import annotations

import pytest

from controller.model import Allocation, Cluster, GpuPool, JobSpec, JobView, Rack
from controller.model.catalog import resolve
from controller.model.perf import MIB_GBIT, iteration_time_s
from controller.network import allocate
from controller.network.jobs import NetJob, job_rates, link_capacity, ring_flows
from controller.network.model import Coflow
from controller.placement import FirstFitPlacer
from controller.records import ReplayResult
from controller.sim import SimConfig, Simulator
from gpuflow.cli import main
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_node


class PinnedPlacer:
    """Places each job on the GPUs the test names."""

    def __init__(self, picks: dict[str, list[tuple[int, int]]]) -> None:
        self.picks = picks

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        alloc = Allocation.whole(self.picks[job.job_id])
        return alloc if pool.fits(alloc, None) else None


def _run(
    cluster: Cluster,
    jobs: list[JobSpec],
    network: str,
    placer: object | None = None,
    policy: str = "fifo",
) -> ReplayResult:
    cfg = SimConfig(round_interval_s=0.0, check_plans=True, network=network)
    chosen = placer if placer is not None else FirstFitPlacer(cluster)
    return Simulator(cluster, jobs, make_policy(policy), chosen, cfg).run()  # type: ignore[arg-type]


def _finish(result: ReplayResult) -> dict[str, float]:
    return {o.job_id: o.finish_s for o in result.jobs if o.finish_s is not None}


def _two_node_time(cluster: Cluster, model: str, gbps: float | None) -> float:
    """Iteration time of a 6-GPU job on 4 + 2 GPUs of nodes 0 and 1."""
    alloc = Allocation.whole([(0, g) for g in range(4)] + [(1, 0), (1, 1)])
    return iteration_time_s(resolve(model), cluster, alloc, inter_node_gbps=gbps)


def _duty(cluster: Cluster, model: str, alone_gbps: float) -> float:
    """Share of a 2-node job's iteration on the wire at its rate alone."""
    wire_s = resolve(model).grad_mib * MIB_GBIT / alone_gbps  # 2(N-1)/N = 1
    return wire_s / _two_node_time(cluster, model, alone_gbps)


# Three 4-GPU nodes, 100 Gbit/s NICs; first fit puts two 6-GPU jobs on nodes 0+1 and
# 1+2, so both rings cross node 1's NIC in each direction.
SHARED = make_cluster(nodes=3, gpus=4)


def test_ring_flows_cross_each_nic_once_and_carry_the_ring_bytes() -> None:
    cluster = make_cluster(nodes=4, gpus=4, racks=2)
    job = NetJob("j", (3, 0, 2), grad_mib=300.0)
    flows = ring_flows(cluster, job)
    assert [f.links for f in flows] == [
        (("nic-up", 0), ("nic-down", 2), ("rack-up", 0), ("rack-down", 1)),
        (("nic-up", 2), ("nic-down", 3)),
        (("nic-up", 3), ("nic-down", 0), ("rack-up", 1), ("rack-down", 0)),
    ]
    mb = 2 * 2 / 3 * 300.0 * 2**20 / 1e6
    assert all(f.remaining_mb == pytest.approx(mb) for f in flows)
    assert link_capacity(cluster, ("rack-up", 1)) == 200.0


def test_fair_gives_two_jobs_on_one_nic_half_of_it_each() -> None:
    a = NetJob("a", (0, 1), grad_mib=100.0)
    b = NetJob("b", (1, 2), grad_mib=100.0)
    flows = ring_flows(SHARED, a) + ring_flows(SHARED, b)
    caps = {link: link_capacity(SHARED, link) for f in flows for link in f.links}
    rates = allocate("fair", caps, flows, [Coflow("a"), Coflow("b")])
    assert set(rates.values()) == {50.0}


def test_two_jobs_sharing_a_nic_slow_each_other_as_the_model_says() -> None:
    # vgg16: a large all-reduce beside its compute, so that the contended NIC shows
    # (ResNet-50's measured V100 speed makes its compute long enough to hide it).
    jobs = [
        make_job("a", 6, duration_s=1000, model="vgg16"),
        make_job("b", 6, duration_s=1000, model="vgg16"),
    ]
    model = jobs[0].model
    alone = _two_node_time(SHARED, model, None)
    assert alone == pytest.approx(_two_node_time(SHARED, model, 100.0))
    # Contended: half of the NIC while both transfer, all of it while the other computes.
    phi = _duty(SHARED, model, 100.0)
    gbps = 50.0 + 50.0 * (1.0 - phi)
    slowed = _two_node_time(SHARED, model, gbps)
    assert slowed > alone * 1.001
    finish = _finish(_run(SHARED, jobs, "fair"))
    assert finish["a"] == pytest.approx(1000.0 * slowed / alone)
    assert finish["b"] == pytest.approx(1000.0 * slowed / alone)
    # Dedicated (today's model): no sharing at all.
    assert _finish(_run(SHARED, jobs, "dedicated")) == pytest.approx({"a": 1000.0, "b": 1000.0})


def test_a_lone_multi_node_job_is_unaffected() -> None:
    jobs = [make_job("a", 8, duration_s=700), make_job("small", 2, duration_s=300)]
    cluster = make_cluster(nodes=3, gpus=4)
    for network in ("fair", "sebf", "aalo", "sincronia"):
        finish = _finish(_run(cluster, jobs, network))
        assert finish == pytest.approx({"a": 700.0, "small": 300.0}), network


def test_rates_restore_when_the_other_job_finishes() -> None:
    jobs = [make_job("a", 6, duration_s=400), make_job("b", 6, duration_s=1000)]
    model = jobs[0].model
    slow = _two_node_time(SHARED, model, 50.0 + 50.0 * (1.0 - _duty(SHARED, model, 100.0)))
    factor = slow / _two_node_time(SHARED, model, 100.0)
    finish = _finish(_run(SHARED, jobs, "fair"))
    assert finish["a"] == pytest.approx(400.0 * factor)
    # b did 400 s of nominal work by then, and runs its last 600 s alone at full speed.
    assert finish["b"] == pytest.approx(400.0 * factor + 600.0)


def test_sebf_favours_the_job_with_the_smaller_bottleneck() -> None:
    big = NetJob("big", (0, 1), grad_mib=resolve("vgg16").grad_mib)
    small = NetJob("small", (1, 2), grad_mib=resolve("resnet50").grad_mib)
    times = {"big": "vgg16", "small": "resnet50"}

    def iteration_s(job_id: str, gbps: float) -> float:
        return _two_node_time(SHARED, times[job_id], gbps)

    fair = job_rates("fair", SHARED, [big, small], iteration_s)
    sebf = job_rates("sebf", SHARED, [big, small], iteration_s)
    assert sebf["small"] == pytest.approx(100.0)  # first in line: all of the NIC
    assert sebf["small"] > fair["small"]
    assert sebf["big"] < fair["big"]
    # Behind it, the big job still gets the NIC while the small one computes.
    phi_small = _duty(SHARED, "resnet50", 100.0)
    assert sebf["big"] == pytest.approx(100.0 * (1.0 - phi_small))
    # In replay the small job finishes sooner under SEBF than under fair sharing.
    jobs = [
        make_job("big", 6, duration_s=1000, model="vgg16"),
        make_job("small", 6, duration_s=1000, model="resnet50"),
    ]
    assert (
        _finish(_run(SHARED, jobs, "sebf"))["small"] < _finish(_run(SHARED, jobs, "fair"))["small"]
    )


def test_same_input_same_result() -> None:
    jobs = [
        make_job(f"j{i}", 4 + 2 * (i % 3), submit_s=37.0 * i, duration_s=300 + 50 * i, model=m)
        for i, m in enumerate(["vgg16", "resnet50", "gpt2", "bert", "vgg16", "resnet50"])
    ]
    cluster = make_cluster(nodes=6, gpus=4, racks=2)
    for network in ("fair", "sebf", "aalo", "sincronia"):
        one = _run(cluster, jobs, network, policy="srtf")
        two = _run(cluster, jobs, network, policy="srtf")
        assert [(o.job_id, o.finish_s) for o in one.jobs] == [
            (o.job_id, o.finish_s) for o in two.jobs
        ]


def _two_racks(uplink_gbps: float) -> Cluster:
    return Cluster(
        name="2x2x4",
        nodes=tuple(make_node(f"n{i}", 4, rack=i // 2) for i in range(4)),
        racks=(Rack("r0", uplink_gbps), Rack("r1", uplink_gbps)),
    )


def test_an_oversubscribed_uplink_slows_cross_rack_jobs() -> None:
    # x on nodes 0 (rack 0) + 2 (rack 1), y on 1 (rack 0) + 3 (rack 1): both cross the
    # uplinks. 4:1 oversubscribed, each rack has 50 Gbit/s for two 100 Gbit/s NICs.
    picks = {
        "x": [(0, g) for g in range(4)] + [(2, g) for g in range(4)],
        "y": [(1, g) for g in range(4)] + [(3, g) for g in range(4)],
    }
    jobs = [make_job(j, 8, duration_s=1000, model="vgg16") for j in ("x", "y")]
    thin = _finish(_run(_two_racks(50.0), jobs, "fair", PinnedPlacer(picks)))
    wide = _finish(_run(_two_racks(400.0), jobs, "fair", PinnedPlacer(picks)))
    assert wide == pytest.approx({"x": 1000.0, "y": 1000.0})  # non-blocking: NICs bound
    # Each gets 25 Gbit/s of the uplink while the other transfers, 50 while it computes.
    cluster = _two_racks(50.0)
    vgg = resolve("vgg16")
    alloc = Allocation.whole(picks["x"])
    phi = (
        vgg.grad_mib * MIB_GBIT / 50.0 / iteration_time_s(vgg, cluster, alloc, inter_node_gbps=50.0)
    )
    gbps = 25.0 + 25.0 * (1.0 - phi)
    factor = iteration_time_s(vgg, cluster, alloc, inter_node_gbps=gbps) / iteration_time_s(
        vgg, cluster, alloc, inter_node_gbps=100.0
    )
    assert factor > 1.2
    assert thin == pytest.approx({"x": 1000.0 * factor, "y": 1000.0 * factor})


def test_an_unknown_network_is_refused() -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    with pytest.raises(ValueError, match="known: dedicated, fair"):
        Simulator(
            cluster,
            [],
            make_policy("fifo"),
            FirstFitPlacer(cluster),
            SimConfig(network="bogus"),
        )


def test_cli_refuses_an_unknown_network_in_one_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", "no-such-trace.csv", "-c", "2x4", "-p", "fifo", "--network", "wan"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err == (
        "gpuflow: error: unknown network 'wan' "
        "(known: dedicated, fair, sebf, aalo, aalo-strict, sincronia)"
    )
