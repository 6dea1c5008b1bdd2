"""Tiresias: discretized 2D-LAS queues, starvation promotion, 2D-Gittins index, skew-aware
consolidation, wake-ups at threshold crossings (Gu et al., NSDI 2019)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from controller.metrics import summarize
from controller.model import Action, Allocation, JobSpec, JobStatus, JobView, Snapshot
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.traces.formats.synthetic import generate
from policies.fifo import Fifo
from policies.tiresias import Promotion, Tiresias, TiresiasState
from policies.tiresias.gittins import ServiceDistribution
from tests.builders import make_cluster, make_job, make_view
from tests.policies.invariants import check_round, random_snapshot

NOW = 100_000.0


def _snapshot(views: list[JobView], nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=NOW, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def _gpus(node: int, first: int, count: int) -> Allocation:
    return Allocation.whole((node, g) for g in range(first, first + count))


def _running(spec: JobSpec, alloc: Allocation, attained_gpu_s: float) -> JobView:
    return make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=alloc,
        now_s=NOW,
        attained_gpu_s=attained_gpu_s,
        executed_s=attained_gpu_s / alloc.num_gpus,
    )


def _waiting(spec: JobSpec, attained_gpu_s: float = 0.0) -> JobView:
    status = JobStatus.PREEMPTED if attained_gpu_s else JobStatus.QUEUED
    return make_view(
        spec,
        status=status,
        now_s=NOW,
        attained_gpu_s=attained_gpu_s,
        executed_s=attained_gpu_s / spec.num_gpus,
        waiting_since_s=NOW,
    )


@pytest.mark.parametrize(
    ("attained_gpu_s", "runs"),
    [
        (3000.0, "old"),  # still in Q0 and submitted first: FIFO keeps it
        (3250.0, "new"),  # at the threshold: demoted to Q1, the Q0 arrival preempts it
        (9000.0, "new"),  # Q2
    ],
)
def test_a_job_past_the_threshold_is_demoted_and_preempted(
    attained_gpu_s: float, runs: str
) -> None:
    old = _running(make_job("old", 4, submit_s=0), _gpus(0, 0, 4), attained_gpu_s)
    new = _waiting(make_job("new", 4, submit_s=NOW - 10))
    snap = _snapshot([old, new])
    plan = Tiresias().schedule(snap, None)
    assert set(plan.run) == {runs}
    if runs == "new":
        assert plan.actions(snap) == {"old": Action.PREEMPT, "new": Action.START}
        reason = plan.reason_for("old")
        assert reason is not None and reason.code == "Preempted" and "Q" in reason.message
    else:
        reason = plan.reason_for("new")
        assert reason is not None and reason.code == "LowerPriorityQueue"
        assert "Q0" in reason.message


def test_fifo_by_submit_time_inside_a_queue() -> None:
    views = [_waiting(make_job(name, 4, submit_s=t)) for name, t in [("c", 3), ("a", 1), ("b", 2)]]
    assert set(Tiresias().schedule(_snapshot(views), None).run) == {"a"}
    tie = [_waiting(make_job(name, 4, submit_s=5)) for name in ("y", "x")]
    assert set(Tiresias().schedule(_snapshot(tie), None).run) == {"x"}


@pytest.mark.parametrize(("running_first", "runs"), [(False, {"big"}), (True, {"small"})])
def test_running_first_keeps_a_running_job_ahead_of_an_earlier_waiting_one(
    running_first: bool, runs: set[str]
) -> None:
    # Both in Q0: "big" arrived first but did not fit, "small" started behind it.
    big = _waiting(make_job("big", 4, submit_s=1))
    small = _running(make_job("small", 2, submit_s=2), _gpus(0, 0, 2), attained_gpu_s=100.0)
    snap = _snapshot([big, small])
    policy = Tiresias(running_first=running_first)
    plan = policy.schedule(snap, None)
    assert set(plan.run) == runs
    if running_first:  # as the simulator: only a higher queue preempts
        assert plan.actions(snap) == {"small": Action.KEEP}
        assert policy.queue_order(snap, plan.state) == ["small", "big"]
    else:  # FIFO by entry: the earlier arrival preempts
        assert plan.actions(snap) == {"small": Action.PREEMPT, "big": Action.START}
        assert policy.queue_order(snap, plan.state) == ["big", "small"]


def test_fifo_by_queue_entry_time_below_q0() -> None:
    # Both in Q1; "late" was submitted first but entered Q1 later (state says so).
    late = _waiting(make_job("late", 4, submit_s=0), attained_gpu_s=4000.0)
    early = _waiting(make_job("early", 4, submit_s=50), attained_gpu_s=4000.0)
    state = TiresiasState(entered={"late": (1, 900.0), "early": (1, 500.0)})
    plan = Tiresias(starve_limit=0).schedule(_snapshot([late, early]), state)
    assert set(plan.run) == {"early"}
    assert plan.state.entered == {"late": (1, 900.0), "early": (1, 500.0)}


def test_entry_time_of_a_demotion_is_the_threshold_crossing() -> None:
    # 2 GPUs, 3450 GPU-s attained now: crossed 3250 GPU-s 100 s ago.
    job = _running(make_job("j", 2), _gpus(0, 0, 2), 3450.0)
    plan = Tiresias().schedule(_snapshot([job]), None)
    assert plan.state.entered["j"] == (1, pytest.approx(NOW - 100.0))


@pytest.mark.parametrize(
    ("now_s", "promoted"),
    [
        (71_000.0, False),  # waited 63,000 s < 8 x 8,000 s run
        (72_000.0, True),  # waited 64,000 s: the starvation limit
    ],
)
def test_a_starved_job_is_promoted_to_q0(now_s: float, promoted: bool) -> None:
    # "starved" ran 8,000 s on 1 GPU (Q2) from t=0; "holder" runs in Q1.
    starved = dataclasses.replace(
        _waiting(make_job("starved", 1, submit_s=0), attained_gpu_s=8000.0),
        mark_s=8000.0,
        waiting_since_s=8000.0,
    )
    holder = _running(make_job("holder", 1, submit_s=1), _gpus(0, 0, 1), 4000.0)
    holder = dataclasses.replace(holder, mark_s=now_s, resume_s=now_s)
    cluster = make_cluster(nodes=1, gpus=1)
    snap = Snapshot(
        now_s=now_s, cluster=cluster, jobs=(starved, holder), placer=ConsolidatedPlacer(cluster)
    )
    plan = Tiresias().schedule(snap, None)
    assert ("starved" in plan.run) is promoted
    assert ("starved" in plan.state.promotions) is promoted
    if promoted:
        assert plan.state.promotions["starved"] == Promotion(72_000.0, 8000.0, 8000.0, 1)
        assert plan.reason_for("holder") is not None
    else:
        # Wake when the starvation limit falls, before the holder crosses 7,200 GPU-s.
        assert plan.wake_s == pytest.approx(72_000.0)


def test_a_promoted_job_counts_service_from_its_promotion() -> None:
    job = _waiting(make_job("p", 1), attained_gpu_s=20_000.0)
    state = TiresiasState(promotions={"p": Promotion(NOW - 50, 19_000.0, 19_000.0)})
    plan = Tiresias().schedule(_snapshot([job]), state)
    assert "p" in plan.run
    assert plan.state.promotions["p"].attained_gpu_s == 19_000.0
    assert "p" not in plan.state.entered  # 1,000 GPU-s since promotion: Q0
    # It now crosses 3,250 GPU-s of service after the promotion, 2,250 s from now.
    assert plan.wake_s == pytest.approx(NOW + 2250.0)


@pytest.mark.parametrize(
    ("gpus", "attained_gpu_s", "thresholds", "wake"),
    [
        (2, 1000.0, (3250.0, 7200.0), NOW + 1125.0),  # (3250 - 1000) / 2
        (4, 5000.0, (3250.0, 7200.0), NOW + 550.0),  # Q1: (7200 - 5000) / 4
        (4, 8000.0, (3250.0, 7200.0), None),  # last queue: nothing to cross
        (1, 0.0, (), None),  # one queue
    ],
)
def test_wake_s_is_the_analytic_threshold_crossing(
    gpus: int, attained_gpu_s: float, thresholds: tuple[float, ...], wake: float | None
) -> None:
    job = _running(make_job("j", gpus), _gpus(0, 0, gpus), attained_gpu_s)
    # A restart overhead still running does not delay the crossing: attained service
    # counts GPUs held.
    job = dataclasses.replace(job, resume_s=NOW + 30.0)
    plan = Tiresias(thresholds_gpu_s=thresholds).schedule(_snapshot([job]), None)
    assert plan.wake_s == (None if wake is None else pytest.approx(wake))


def test_wake_s_counts_a_job_started_this_round_on_its_new_gpus() -> None:
    job = _waiting(make_job("j", 4), attained_gpu_s=2000.0)
    plan = Tiresias().schedule(_snapshot([job]), None)
    assert "j" in plan.run and plan.wake_s == pytest.approx(NOW + 1250.0 / 4)


@pytest.mark.parametrize(
    ("attained", "delta", "index"),
    [
        (0.0, 1.0, 1 / 3),  # P = 1/3, E[min(S, 1)] = 1
        (0.0, 2.0, 2 / 5),  # P = 2/3, E = (1 + 2 + 2) / 3
        (0.0, 4.0, 3 / 7),  # P = 1, E = 7/3
        (0.0, math.inf, 3 / 7),
        (1.0, 1.0, 1 / 2),  # S in {2, 4}: P = 1/2, E = 1
        (1.0, 3.0, 1 / 2),  # P = 1, E = (1 + 3) / 2
        (2.0, 1.0, 0.0),  # S = 4: cannot finish within 1 more
        (2.0, 2.0, 1 / 2),
        (4.0, 1.0, 0.0),  # past every sample
    ],
)
def test_gittins_index_matches_hand_computed_values(
    attained: float, delta: float, index: float
) -> None:
    dist = ServiceDistribution.from_samples([4.0, 1.0, 2.0])
    assert dist.index(attained, delta) == pytest.approx(index)


def test_gittins_runs_the_job_likeliest_to_finish_soon() -> None:
    # Most jobs need 100 GPU-s; one 10,000. "near" attained 99 and is likelier to
    # finish per GPU-second spent than "fresh", which FIFO (2D-LAS) would pick.
    samples = (100.0, 100.0, 100.0, 10_000.0)
    fresh = _waiting(make_job("fresh", 1, submit_s=0))
    near = _waiting(make_job("near", 1, submit_s=5), attained_gpu_s=99.0)
    snap = _snapshot([fresh, near], gpus=1)
    assert set(Tiresias(thresholds_gpu_s=()).schedule(snap, None).run) == {"fresh"}
    gittins = Tiresias(thresholds_gpu_s=(), service_samples_gpu_s=samples)
    assert set(gittins.schedule(snap, None).run) == {"near"}
    # Queues stay: in Q1 (past 50 GPU-s) "near" yields to Q0 whatever its index.
    queued = Tiresias(thresholds_gpu_s=(50.0,), service_samples_gpu_s=samples)
    assert set(queued.schedule(snap, None).run) == {"fresh"}


@pytest.mark.parametrize(
    ("model", "nodes"),
    [
        ("vgg16", None),  # skewed: waits for one free node rather than span two
        ("resnet50", 2),  # not skewed: spreads over the free GPUs of two nodes
    ],
)
def test_skewed_models_are_consolidated(model: str, nodes: int | None) -> None:
    r0 = _running(make_job("r0", 4, submit_s=0), _gpus(0, 0, 4), 100.0)
    r1 = _running(make_job("r1", 4, submit_s=1), _gpus(1, 0, 4), 100.0)
    big = _waiting(make_job("big", 8, submit_s=2, model=model))
    plan = Tiresias().schedule(_snapshot([r0, r1, big], nodes=2, gpus=8), None)
    assert {"r0", "r1"} <= set(plan.run)
    if nodes is None:
        reason = plan.reason_for("big")
        assert reason is not None and reason.code == "AwaitingConsolidation"
        assert "Q0" in reason.message
    else:
        assert len(plan.run["big"].nodes) == nodes


def test_a_skewed_job_takes_one_node_when_one_is_free() -> None:
    r0 = _running(make_job("r0", 4), _gpus(0, 0, 4), 100.0)
    big = _waiting(make_job("big", 8, submit_s=2, model="vgg16"))
    plan = Tiresias().schedule(_snapshot([r0, big], nodes=2, gpus=8), None)
    assert plan.run["big"].nodes == (1,)


def test_a_preemption_that_frees_nothing_usable_is_not_made() -> None:
    # "big" (Q0, skewed) is admitted by count, which would stop "low" (Q1), but cannot
    # be consolidated anyway: "low" keeps running.
    r0 = _running(make_job("r0", 4, submit_s=0), _gpus(0, 0, 4), 100.0)
    low = _running(make_job("low", 4, submit_s=1), _gpus(1, 0, 4), 5000.0)
    r2 = _running(make_job("r2", 4, submit_s=2), _gpus(1, 4, 4), 100.0)
    big = _waiting(make_job("big", 8, submit_s=3, model="vgg16"))
    snap = _snapshot([r0, low, r2, big], nodes=2, gpus=8)
    plan = Tiresias().schedule(snap, None)
    assert set(plan.run) == {"r0", "low", "r2"}
    assert plan.actions(snap)["low"] is Action.KEEP


@pytest.mark.parametrize("seed", range(40))
def test_round_invariants_and_determinism(seed: int) -> None:
    snap = random_snapshot(seed)
    plan = check_round(Tiresias(), snap)
    again = check_round(Tiresias(), snap, plan.state)
    assert check_round(Tiresias(), snap, plan.state).state == again.state
    assert again.wake_s == Tiresias().schedule(snap, plan.state).wake_s
    samples = tuple(float(s) for s in range(100, 20_000, 450))
    check_round(Tiresias(service_samples_gpu_s=samples), snap)
    check_round(Tiresias(running_first=True), snap)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"starve_limit": 0.0},
        {"service_samples_gpu_s": (600.0, 3600.0, 36_000.0)},
        {"starve_limit": 0.0, "running_first": True},
    ],
)
def test_replay_keeps_invariants_and_finishes_every_job(options: dict[str, object]) -> None:
    cluster = make_cluster(nodes=4, gpus=4, racks=2)
    jobs = generate(150, seed=7, cluster_gpus=cluster.num_gpus, load=1.5)
    sim = Simulator(
        cluster,
        jobs,
        Tiresias(**options),  # type: ignore[arg-type]
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, check_plans=True),
    )
    result = sim.run()
    assert all(o.finish_s is not None for o in result.jobs)
    assert result.gpu_s_allocated <= result.gpu_s_capacity + 1e-6


def test_replay_a_short_arrival_preempts_a_demoted_long_job() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    jobs = [
        make_job("long", 4, submit_s=0, duration_s=5000),
        make_job("short", 4, submit_s=1000, duration_s=500),
    ]
    results = {}
    for policy in (Tiresias(), Fifo()):
        sim = Simulator(
            cluster, jobs, policy, ConsolidatedPlacer(cluster), SimConfig(check_plans=True)
        )
        results[policy.name] = {o.job_id: o for o in sim.run().jobs}
    short = results["tiresias"]["short"]
    assert short.first_start_s == 1020.0  # the first round after its arrival
    assert results["tiresias"]["long"].preemptions == 1
    fifo_start = results["fifo"]["short"].first_start_s
    assert fifo_start is not None and fifo_start >= 5000.0  # behind the long job


def test_replay_beats_fifo_on_average_jct() -> None:
    cluster = make_cluster(nodes=4, gpus=4)
    jobs = generate(300, seed=11, cluster_gpus=16, load=1.3)
    avg = {}
    for policy in (Tiresias(), Fifo()):
        sim = Simulator(cluster, jobs, policy, ConsolidatedPlacer(cluster), SimConfig())
        avg[policy.name] = summarize(sim.run()).avg_jct_s
    assert avg["tiresias"] < avg["fifo"]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Tiresias(thresholds_gpu_s=(7200.0, 3250.0))
    with pytest.raises(ValueError, match="starve_limit"):
        Tiresias(starve_limit=-1.0)
    with pytest.raises(ValueError, match="> 0"):
        Tiresias(service_samples_gpu_s=(0.0, 5.0))
