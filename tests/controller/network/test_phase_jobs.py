"""Multi-node jobs under the phase-level model (`--network-model phases`) and its policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.metrics import summarize
from controller.model import Allocation, Cluster, JobSpec
from controller.model.catalog import resolve
from controller.model.perf import iteration_time_s
from controller.network.jobs import NetJob
from controller.network.phases import PhaseJob
from controller.network.phases.cassini import compatibility, time_shifts
from controller.network.phases.crux import PRIORITY_FLOOR, Intensity, priorities
from controller.network.phases.jobs import phase_job_rates
from controller.network.registry import phase_form
from controller.placement import FirstFitPlacer
from controller.records import ReplayResult
from controller.sim import SimConfig, Simulator
from gpuflow.cli import main
from policies.registry import make_policy
from tests.builders import make_cluster, make_job

# Three 4-GPU nodes, 100 Gbit/s NICs; first fit puts two 6-GPU jobs on nodes 0+1 and
# 1+2, so both rings cross node 1's NIC in each direction.
SHARED = make_cluster(nodes=3, gpus=4)


def _run(cluster: Cluster, jobs: list[JobSpec], network: str, model: str) -> dict[str, float]:
    cfg = SimConfig(round_interval_s=0.0, check_plans=True, network=network, network_model=model)
    result: ReplayResult = Simulator(
        cluster, jobs, make_policy("fifo"), FirstFitPlacer(cluster), cfg
    ).run()
    return {o.job_id: o.finish_s for o in result.jobs if o.finish_s is not None}


def _time(model: str, alloc: Allocation, gbps: float) -> float:
    return iteration_time_s(resolve(model), SHARED, alloc, inter_node_gbps=gbps)


A = Allocation.whole([(0, g) for g in range(4)] + [(1, 0), (1, 1)])
B = Allocation.whole([(1, 2), (1, 3)] + [(2, g) for g in range(4)])


@pytest.mark.parametrize("network", ["fair", "cassini", "crux", "mltcp"])
def test_a_lone_multi_node_job_gets_the_steady_models_time(network: str) -> None:
    cluster = make_cluster(nodes=6, gpus=4, racks=2)
    jobs = [make_job("a", 16, duration_s=700, model="vgg16"), make_job("s", 2, duration_s=300)]
    steady = _run(cluster, jobs, "fair", "steady")
    assert _run(cluster, jobs, network, "phases") == steady
    assert steady == pytest.approx({"a": 700.0, "s": 300.0})


def _iteration_s(job_id: str, gbps: float) -> float:
    return _time("vgg16", A if job_id == "a" else B, gbps)


def test_two_jobs_in_phase_on_one_nic_collide_and_cassini_shifts_them_apart() -> None:
    jobs = [
        NetJob("a", (0, 1), grad_mib=resolve("vgg16").grad_mib, gpus=6),
        NetJob("b", (1, 2), grad_mib=resolve("vgg16").grad_mib, gpus=6),
    ]
    fair = phase_job_rates(phase_form("fair"), SHARED, jobs, _iteration_s, now_s=0.0)
    cassini = phase_job_rates(phase_form("cassini"), SHARED, jobs, _iteration_s, now_s=0.0)
    # Both started at 0: in phase, every burst collides: each job sees less than its NIC.
    assert fair["a"] < 100.0 * 0.99 and fair["b"] < 100.0 * 0.99
    # vgg16's burst is well under half of its iteration at 100 Gbit/s: shifted apart,
    # neither job waits.
    assert cassini == pytest.approx({"a": 100.0, "b": 100.0})


def test_equivalent_rate_reproduces_the_phase_iteration_time() -> None:
    jobs = [
        NetJob("a", (0, 1), grad_mib=resolve("vgg16").grad_mib, gpus=6),
        NetJob("b", (1, 2), grad_mib=resolve("vgg16").grad_mib, gpus=6),
    ]
    gbps = phase_job_rates(phase_form("fair"), SHARED, jobs, _iteration_s, now_s=0.0)
    alone = _iteration_s("a", 100.0)
    mb = jobs[0].flow_mb
    burst = mb / 125.0 / 100.0
    # In phase, fair: each burst takes twice as long, so T' = T + burst.
    assert _iteration_s("a", gbps["a"]) == pytest.approx(alone + burst, rel=1e-6)


def test_replay_cassini_finishes_the_colliding_pair_sooner_than_fair() -> None:
    jobs = [make_job(j, 6, duration_s=2000, model="vgg16") for j in ("a", "b")]
    fair = _run(SHARED, jobs, "fair", "phases")
    cassini = _run(SHARED, jobs, "cassini", "phases")
    assert cassini == pytest.approx({"a": 2000.0, "b": 2000.0})
    assert fair["a"] > 2000.0 * 1.01 and fair["b"] > 2000.0 * 1.01


def test_crux_puts_the_more_intense_job_first() -> None:
    got = priorities(
        [Intensity("lo", 1.0, 1.0), Intensity("hi", 8.0, 1.0), Intensity("mid", 4.0, 2.0)],
        levels=2,
    )
    assert got == {"hi": 1, "mid": 1, "lo": 0}


def test_crux_keeps_jobs_of_equal_intensity_on_one_level() -> None:
    # Equal-count bands would cut the three equal jobs 2 / 1 across levels 3 and 2,
    # and strict priority would let one of them starve its twin.
    same = [Intensity(f"s{i}", 2.0, 1.0) for i in range(3)]
    got = priorities([*same, Intensity("lo", 1.0, 1.0)], levels=4)
    assert got == {"s0": 3, "s1": 3, "s2": 3, "lo": 0}


def test_crux_keeps_the_intense_job_at_full_speed_in_replay() -> None:
    # a: VGG16 (large gradient, low intensity); b: ResNet-50 (compute-heavy). b
    # yields only a's floor (1 % of the NIC) while both send.
    jobs = [make_job("a", 6, duration_s=2000, model="vgg16"), make_job("b", 6, duration_s=2000)]
    crux = _run(SHARED, jobs, "crux", "phases")
    assert crux["b"] == pytest.approx(2000.0, rel=PRIORITY_FLOOR)
    assert crux["a"] >= 2000.0


def test_cassini_shifts_three_jobs_on_a_line_so_no_bursts_overlap() -> None:
    jobs = [
        PhaseJob("a", 3.0, 125.0, ("l1",)),
        PhaseJob("b", 3.0, 125.0, ("l1", "l2")),
        PhaseJob("c", 3.0, 125.0, ("l2",)),
    ]
    shifts = time_shifts(jobs, dict.fromkeys("abc", 4.0))
    assert shifts["a"] == 0.0
    assert abs(shifts["b"] - shifts["a"]) >= 1.0 and abs(shifts["c"] - shifts["b"]) >= 1.0


@pytest.mark.parametrize(
    ("network", "model", "message"),
    [
        ("cassini", "steady", "needs the network model 'phases'"),
        ("aalo", "phases", "has no phase-level form"),
        ("fair", "bursty", "unknown network model"),
    ],
)
def test_unknown_combinations_are_refused_by_name(network: str, model: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _run(SHARED, [make_job("a", 6)], network, model)


def test_time_waiting_on_a_shared_link_is_not_gpu_compute() -> None:
    jobs = [make_job(j, 6, duration_s=2000, model="vgg16") for j in ("a", "b")]

    def replay(network: str) -> ReplayResult:
        cfg = SimConfig(round_interval_s=0.0, network=network, network_model="phases")
        return Simulator(SHARED, jobs, make_policy("fifo"), FirstFitPlacer(SHARED), cfg).run()

    fair, cassini = replay("fair"), replay("cassini")
    # The same compute is done either way; under fair it is spread over a longer run.
    assert fair.gpu_s_busy == pytest.approx(cassini.gpu_s_busy, rel=1e-6)
    assert summarize(fair).gpu_utilization < summarize(cassini).gpu_utilization * 0.99


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--network", "cassini"], "network 'cassini' needs the network model 'phases'"),
        (["--network", "fair", "--network-model", "waves"], "unknown network model 'waves'"),
    ],
)
def test_cli_refuses_a_network_without_its_model_in_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["replay", "no-such-trace.csv", "-c", "2x4", "-p", "fifo", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err


def test_cli_replays_with_the_phase_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_s,num_gpus,model,duration_s\na,0,6,vgg16,2000\nb,0,6,vgg16,2000\n"
    )
    head = ["replay", str(trace), "-c", "3x4", "-p", "fifo", "--placement", "first-fit"]
    for network in ("fair", "cassini"):
        code = main([*head, "--network", network, "--network-model", "phases", "--json"])
        assert code == 0
    fair, cassini = (json.loads(x) for x in capsys.readouterr().out.strip().splitlines()[-2:])
    assert cassini["avg_jct_s"] == pytest.approx(2000.0, rel=1e-3)
    assert fair["avg_jct_s"] > cassini["avg_jct_s"] * 1.01


def test_cassini_compatibility_scores_a_colliding_pair_below_a_shifted_one() -> None:
    # Period 100 ms, burst 40 ms at 25 Gbit/s each: in phase the link is asked for
    # 50 Gbit/s 40 % of the time, an excess of 0.4 of its capacity on average.
    def pair(shift_s: float) -> list[PhaseJob]:
        return [
            PhaseJob("a", 0.06, 125.0, ("l",)),
            PhaseJob("b", 0.06, 125.0, ("l",), offset_s=shift_s),
        ]

    periods = {"a": 0.1, "b": 0.1}
    assert compatibility(pair(0.0), periods, 25.0) == pytest.approx(0.6)
    assert compatibility(pair(0.05), periods, 25.0) == pytest.approx(1.0)
