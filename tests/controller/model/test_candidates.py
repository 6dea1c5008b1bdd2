"""The GPU-choice filter (controller.model.gpu_choice.candidates) and the controller's check of a
plan against it (controller.checks): what each refuses, and that a deliberately bad
plan is caught, by the check in tests and held back live."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.checks import PlanDefects, check_plan
from controller.model import Allocation, Cluster, JobStatus, Plan, PlanError, Reason, Snapshot
from controller.model.gpu_choice.candidates import plan_refusals, pool_for, refusal
from controller.placement import make_placer
from tests.builders import TEST_GPU, make_cluster, make_job, make_view

FAST = replace(TEST_GPU, name="FAST-16GB")


def _cluster() -> Cluster:
    """Two 4-GPU nodes: n0 with 8 CPU, n1 (FAST GPUs) with 32."""
    base = make_cluster(nodes=2)
    n0, n1 = base.nodes
    nodes = (
        replace(n0, cpu_milli=8000, host_mem_mib=65536),
        replace(n1, cpu_milli=32000, host_mem_mib=65536, gpu_type=FAST),
    )
    return Cluster(base.name, nodes, base.racks, base.groups)


def _snapshot(cordoned: frozenset[int] = frozenset()) -> Snapshot:
    """`run` holds n0's GPUs 0-1 and 6 of its 8 CPU; `wait` asks 2 GPUs and 4 CPU;
    `fast` asks 1 GPU of model FAST only."""
    cluster = _cluster()
    run = make_view(
        replace(make_job("run", 2), cpu_milli=6000),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole([(0, 0), (0, 1)]).with_host(
            replace(make_job("x"), cpu_milli=6000).host
        ),
    )
    wait = make_view(replace(make_job("wait", 2), cpu_milli=4000))
    fast = make_view(replace(make_job("fast", 1), gpu_models=frozenset({"FAST-16GB"})))
    placer = make_placer("consolidated", cluster)
    return Snapshot(0.0, cluster, (run, wait, fast), placer, cordoned_nodes=cordoned)


def test_the_filter_refuses_cpu_short_nodes_refused_models_and_cordons() -> None:
    snap = _snapshot(frozenset({1}))
    pool = snap.free_pool()
    run, wait, fast = snap.jobs
    on_n0 = Allocation.whole([(0, 2), (0, 3)])
    why = refusal(snap, pool, wait, on_n0)
    assert why == Reason("WaitingForResources", "n0: needs 4 CPU, 2 allocatable free")
    assert refusal(snap, pool, fast, Allocation.whole([(0, 2)])) == Reason(
        "GpuModelRefused", "node n0 has TEST-16GB GPUs, not accepted"
    )
    assert refusal(snap, pool, fast, Allocation.whole([(1, 0)])) == Reason(
        "NodeCordoned", "node n1 is cordoned: no new work"
    )
    # A running job keeps what it holds, on a cordoned node too.
    held = make_view(run.spec, status=JobStatus.RUNNING, allocation=Allocation.whole([(1, 0)]))
    assert refusal(snap, pool, held, Allocation.whole([(1, 0)])) is None
    # The pool a search may choose from for `wait`: n0 fenced (CPU), n1 cordoned.
    assert pool_for(snap, pool, wait.spec).total_free == 0
    assert pool_for(snap, pool, fast.spec) is not pool


def test_the_check_counts_the_plans_stops_before_its_starts() -> None:
    """`wait` fits n0's CPU once the plan stops `run`: no refusal."""
    snap = _snapshot()
    swap = {"wait": Allocation.whole([(0, 0), (0, 1)])}
    assert plan_refusals(snap, swap, ["wait"], ["run"]) == {}
    both = {**snap.allocations(), **swap, "wait": Allocation.whole([(0, 2), (0, 3)])}
    assert set(plan_refusals(snap, both, ["wait"], [])) == {"wait"}


def test_a_deliberately_bad_plan_is_caught_in_tests_and_held_back_live() -> None:
    snap = _snapshot(frozenset({1}))
    bad = Plan(
        run={
            **snap.allocations(),
            "wait": Allocation.whole([(0, 2), (0, 3)]),  # n0 has 2 of its 4 CPU free
            "fast": Allocation.whole([(1, 0)]),  # n1 is cordoned
        }
    )
    with pytest.raises(PlanError, match="policy bad gave job fast GPUs the filter refuses"):
        check_plan(snap, bad, policy="bad", strict=True)
    defects = PlanDefects()
    held = check_plan(snap, bad, policy="bad", strict=False, defects=defects)
    assert set(held.run) == {"run"}
    assert held.reasons["wait"].code == "WaitingForResources"
    assert held.reasons["fast"].code == "NodeCordoned"
    assert defects.total == 2 and defects.by_policy == {"bad": 2}
    # A good plan passes as it is, `wait` told why it waits though n0 has GPUs free.
    good = Plan(run=snap.allocations(), default_reason=Reason("W", ""))
    checked = check_plan(snap, good, policy="good", strict=True)
    assert checked.run == good.run
    assert checked.reasons == {
        "wait": Reason("WaitingForResources", "n0: needs 4 CPU, 2 allocatable free")
    }
