"""Cordon, drain, uncordon: the pool, compile_plan, the fence, and replays of a node
schedule under every policy (controller.maintenance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.actions import compile_plan
from controller.checks import PlanDefects, check_plan
from controller.failures import FailureScheduleError, load_failures
from controller.maintenance import NodeAction
from controller.model import (
    Allocation,
    GpuPool,
    GpuShare,
    JobStatus,
    Plan,
    PlanError,
    Reason,
    Snapshot,
    validate_plan,
)
from controller.placement import ConsolidatedPlacer, make_placer
from controller.sim import SimConfig, Simulator
from policies.registry import make_policy, policy_names
from tests.builders import make_cluster, make_job, make_view

SCHEDULE = "time_s,node,event\n10,n0,cordon\n100,n0,drain\n200,n0,uncordon\n"


def _pool(cordoned: tuple[int, ...] = ()) -> GpuPool:
    return GpuPool((4, 4), (16384, 16384), cordoned=cordoned)


def test_a_cordoned_node_offers_no_free_gpu_but_gives_a_released_one_back() -> None:
    pool = _pool()
    mine = Allocation.whole([(0, 0), (0, 1)])
    pool.take(mine)
    pool.cordon(0)
    assert pool.free_gpus(0) == [] and pool.total_free == 4
    assert 0 in pool.buckets[0]
    assert not pool.share_fits(0, 2, 0.5, 100)  # no new share either
    pool.release(mine)
    assert pool.free_gpus(0) == [] and pool.total_free == 4
    assert pool.fits(mine, None)  # named, its own GPUs come back
    placer = make_placer("consolidated", make_cluster(nodes=2))
    job = make_view(make_job("a", 2), status=JobStatus.RUNNING, allocation=mine)
    assert placer.place(pool, job, 2) == mine
    other = make_view(make_job("b", 2))
    placed = placer.place(pool, other, 2)
    assert placed is not None and placed.nodes == (1,)
    pool.uncordon(0)
    assert pool.free_gpus(0) == [0, 1, 2, 3] and pool.total_free == 8


def test_the_sticky_placement_survives_a_full_pool() -> None:
    """total_free leaves fenced GPUs out: the job on the cordoned node still returns."""
    pool = _pool(cordoned=(0,))
    mine = Allocation.whole([(0, 0), (0, 1), (0, 2), (0, 3)])
    pool.take(mine)
    pool.take(Allocation.whole([(1, g) for g in range(4)]))
    pool.release(mine)
    assert pool.total_free == 0
    job = make_view(make_job("a", 4), status=JobStatus.RUNNING, allocation=mine)
    placer = make_placer("topology-aware", make_cluster(nodes=2))
    assert placer.place(pool, job, 4) == mine


def _snapshot(cordoned: frozenset[int]) -> Snapshot:
    cluster = make_cluster(nodes=2)
    running = make_view(
        make_job("run", 2),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole([(0, 0), (0, 1)]),
    )
    waiting = make_view(make_job("wait", 2))
    return Snapshot(
        now_s=0.0,
        cluster=cluster,
        jobs=(running, waiting),
        placer=ConsolidatedPlacer(cluster),
        cordoned_nodes=cordoned,
    )


def test_compile_plan_refuses_new_gpus_on_a_cordoned_node() -> None:
    snap = _snapshot(frozenset({0}))
    keep = snap.allocations()
    onto = {**keep, "wait": Allocation.whole([(0, 2), (0, 3)])}
    with pytest.raises(PlanError, match="job wait given new GPUs on cordoned node 0"):
        compile_plan(snap, Plan(run=onto))
    with pytest.raises(PlanError, match="new GPUs on cordoned node 0"):
        validate_plan(snap, Plan(run=onto))
    grow = {"run": Allocation.whole([(0, 0), (0, 1), (0, 2)])}
    grown = make_job("run", 2, min_gpus=1, max_gpus=3)
    elastic = Snapshot(
        now_s=0.0,
        cluster=snap.cluster,
        jobs=(make_view(grown, status=JobStatus.RUNNING, allocation=keep["run"]),),
        placer=snap.placer,
        cordoned_nodes=frozenset({0}),
    )
    with pytest.raises(PlanError, match="job run given new GPUs on cordoned node 0"):
        compile_plan(elastic, Plan(run=grow))
    # Kept, shrunk, re-shared on its own GPUs, or started elsewhere: all fine.
    assert compile_plan(snap, Plan(run=keep, default_reason=Reason("W", ""))) == []
    shrink = {"run": Allocation.whole([(0, 0)])}
    (a,) = compile_plan(elastic, Plan(run=shrink))
    assert a.action.value == "resize"
    half = {"run": Allocation((GpuShare(0, 0, 0.5), GpuShare(0, 1, 0.5)))}
    (a,) = compile_plan(snap, Plan(run=half, default_reason=Reason("W", "")))
    assert a.action.value == "reshare"
    elsewhere = {**keep, "wait": Allocation.whole([(1, 0), (1, 1)])}
    (a,) = compile_plan(snap, Plan(run=elsewhere))
    assert a.job_id == "wait" and a.action.value == "start"
    # Not cordoned: the same plan is fine.
    assert [a.job_id for a in compile_plan(_snapshot(frozenset()), Plan(run=onto))] == ["wait"]


def test_a_plan_onto_a_cordoned_node_is_a_defect_held_back_live_and_refused_in_tests() -> None:
    """The check after the policy (controller.checks): in a replay under test the plan
    is refused, naming the job and the node; live, the job waits, or keeps the GPUs it
    holds, with the filter's reason, and the defect is counted against the policy."""
    snap = _snapshot(frozenset({0}))
    plan = Plan(
        run={"wait": Allocation.whole([(0, 2), (0, 3)]), "run": Allocation.whole([(1, 0), (0, 2)])}
    )
    with pytest.raises(PlanError, match="policy p gave job run GPUs the filter refuses: node n0"):
        check_plan(snap, plan, policy="p", strict=True)
    defects = PlanDefects()
    held = check_plan(snap, plan, policy="p", strict=False, defects=defects)
    # `run` keeps the GPUs it holds (nobody else took them); `wait` waits.
    assert held.run == {"run": snap.allocations()["run"]}
    assert held.reasons["wait"] == Reason("NodeCordoned", "node n0 is cordoned: no new work")
    assert compile_plan(snap, held) == []
    assert defects.by_reason == {"NodeCordoned": 2} and defects.by_policy == {"p": 2}
    keep = snap.allocations()
    assert check_plan(snap, Plan(run=keep), policy="p", strict=True).run == keep


def _schedule(tmp_path: Path, text: str = SCHEDULE) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text(text)
    return path


def test_the_node_schedule_reads_maintenance_and_names_a_bad_event(tmp_path: Path) -> None:
    events = load_failures(_schedule(tmp_path), make_cluster(nodes=3))
    actions = [getattr(e, "action", None) for e in events]
    assert actions == [NodeAction.CORDON, NodeAction.DRAIN, NodeAction.UNCORDON]
    bad = _schedule(tmp_path, "time_s,node,event\n5,n1,evict\n")
    with pytest.raises(FailureScheduleError, match=r"nodes.csv:2: field 'event': must be one"):
        load_failures(bad, make_cluster(nodes=3))


def _nodes_of(sim: Simulator) -> dict[str, tuple[int, ...]]:
    return {i: j.allocation.nodes for i, j in sim.active.items() if j.allocation is not None}


def test_a_replay_cordons_drains_and_uncordons_a_node(tmp_path: Path) -> None:
    cluster = make_cluster(nodes=3, gpus=4)
    jobs = [
        make_job("a", 2, duration_s=1000),
        make_job("b", 2, submit_s=20, duration_s=1000),
        make_job("d", 2, submit_s=300, duration_s=100),
    ]
    config = SimConfig(
        round_interval_s=0.0,
        check_plans=True,
        failures=load_failures(_schedule(tmp_path), cluster),
    )
    placer = ConsolidatedPlacer(cluster)
    sim = Simulator(cluster, jobs, make_policy("fifo"), placer, config)
    sim.advance(5.0)
    assert _nodes_of(sim) == {"a": (0,)}
    sim.advance(50.0)
    # Best fit would put b next to a on n0; cordoned, n0 takes nothing new.
    assert _nodes_of(sim) == {"a": (0,), "b": (1,)}
    assert sim.active["a"].preemptions == 0
    sim.advance(150.0)
    assert _nodes_of(sim) == {"a": (1,), "b": (1,)}  # drained: a moved, once
    assert sim.active["a"].preemptions == 1
    sim.advance(350.0)
    assert _nodes_of(sim)["d"] == (0,)  # uncordoned: work comes back
    result = sim.run()
    by_id = {o.job_id: o for o in result.jobs}
    assert all(o.finish_s is not None for o in result.jobs)
    assert by_id["a"].preemptions == 1 and by_id["b"].preemptions == 0


@pytest.mark.parametrize("policy", policy_names())
def test_no_policy_gives_a_cordoned_node_new_work(policy: str) -> None:
    """Under every policy: while n0 is cordoned no job lands on it, the jobs on it at
    the cordon stay or leave, a drain empties it, and every job still finishes."""
    cluster = make_cluster(nodes=3, gpus=4)
    jobs = [
        make_job(
            f"j{i}", 1 + i % 3, submit_s=7.0 * i, duration_s=300 + 40 * i, min_gpus=1, max_gpus=4
        )
        for i in range(12)
    ]
    sim = Simulator(
        cluster,
        jobs,
        make_policy(policy),
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=10.0, check_plans=True),
    )
    sim.advance(30.0)
    sim.maintain(0, NodeAction.CORDON, "ops")
    on_node = {i for i, nodes in _nodes_of(sim).items() if 0 in nodes}
    assert on_node, f"{policy}: nothing on n0 to keep"
    for t in range(40, 200, 10):
        sim.advance(float(t))
        now_on = {i for i, nodes in _nodes_of(sim).items() if 0 in nodes}
        assert now_on <= on_node, f"{policy}: new work on cordoned n0 at {t} s"
    drained = sim.maintain(0, NodeAction.DRAIN, "ops")
    assert set(drained) <= on_node  # some policies moved them off already
    assert all(
        sim.reason_for(i) == Reason("NodeDrained", "preempted: node n0 drained by ops")
        for i in drained
    )
    assert not any(0 in nodes for nodes in _nodes_of(sim).values())
    sim.advance(600.0)
    assert not any(0 in nodes for nodes in _nodes_of(sim).values())
    sim.maintain(0, NodeAction.UNCORDON, "ops")
    result = sim.run()
    assert all(o.finish_s is not None for o in result.jobs), policy
