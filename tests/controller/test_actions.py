"""compile_plan: the edit-journal diff agrees with the full comparison; the whole-GPU
fit check refuses what the pool trial refuses."""

from __future__ import annotations

import dataclasses
import random

import pytest

from controller.actions import JobAction, _job_action, compile_plan, plan_diff
from controller.model import (
    Action,
    Allocation,
    EditedAllocations,
    GpuPool,
    HostRequest,
    JobStatus,
    Plan,
    PlanError,
    Snapshot,
)
from controller.placement import ConsolidatedPlacer
from tests.builders import make_cluster, make_job, make_view


@pytest.mark.parametrize("seed", range(30))
def test_edited_allocations_diff_equals_full_diff(seed: int) -> None:
    rng = random.Random(seed)
    current = {f"j{i}": Allocation.whole([(i, 0)]) for i in range(rng.randint(0, 20))}
    run = EditedAllocations(current)
    for _ in range(rng.randint(0, 15)):
        op = rng.choice(["set", "same", "equal", "del", "pop", "update", "setdefault"])
        key = f"j{rng.randint(0, 25)}"
        if op == "set":
            run[key] = Allocation.whole([(100 + rng.randint(0, 5), 1)])
        elif op == "same" and key in current:
            run[key] = current[key]  # the very object: kept
        elif op == "equal" and key in current:
            run[key] = Allocation(current[key].shares)  # equal, rebuilt
        elif op == "del" and key in run:
            del run[key]
        elif op == "pop":
            run.pop(key, None)
        elif op == "update":
            run.update({key: Allocation.whole([(200, 0)])})
        elif op == "setdefault":
            run.setdefault(key, Allocation.whole([(300, 0)]))

    # Either path may report an equal-but-rebuilt allocation as changed (the caller
    # keeps it); what differs in value must be reported by both.
    def real(diff: tuple[list[str], list[str]]) -> tuple[list[str], list[str]]:
        changed, stopped = diff
        return [k for k in changed if run[k] != current.get(k)], stopped

    journal, full = plan_diff(run, current), plan_diff(dict(run), current)
    assert real(journal) == real(full)
    assert journal[0] == sorted(journal[0]) and journal[1] == sorted(journal[1])


def test_a_plan_not_built_from_the_snapshot_is_diffed_in_full() -> None:
    a, b = Allocation.whole([(0, 0)]), Allocation.whole([(1, 0)])
    assert plan_diff({"x": a, "y": b}, {"x": a, "z": b}) == (["y"], ["z"])
    assert plan_diff({"x": a}, {"x": a}) == ([], [])


def _host_tracking_pool(snapshot: Snapshot) -> GpuPool:
    """The snapshot's free capacity in a pool that tracks (unlimited) host CPU and
    memory, which sends `compile_plan` down its release-and-take check."""
    cluster = snapshot.cluster
    huge = HostRequest(10**9, 10**9)
    pool = GpuPool(
        cluster.gpus_per_node,
        (n.gpu_type.mem_mib for n in cluster.nodes),
        host_capacity=[huge] * len(cluster.nodes),
    )
    for job in snapshot.running():
        assert job.allocation is not None
        pool.take(job.allocation)
    return pool


def _outcome(snapshot: Snapshot, plan: Plan, pool: GpuPool) -> object:
    try:
        return [(a.job_id, a.action, a.allocation) for a in compile_plan(snapshot, plan, pool)]
    except PlanError as exc:
        return str(exc)


@pytest.mark.parametrize("seed", range(200))
def test_the_whole_gpu_fit_check_refuses_what_releasing_and_taking_refuses(seed: int) -> None:
    """Swaps onto the very allocation a stopped job held, starts on free, held or
    doubly claimed GPUs, migrations: the set-based check and the pool trial agree."""
    rng = random.Random(seed)
    cluster = make_cluster(nodes=3, gpus=4)
    gpus = [(n, g) for n in range(3) for g in range(4)]
    rng.shuffle(gpus)
    views = []
    for i in range(rng.randint(0, 5)):
        size = rng.randint(1, 2)
        if len(gpus) < size:
            break
        held, gpus = gpus[:size], gpus[size:]
        spec = make_job(f"r{i}", size)
        views.append(make_view(spec, status=JobStatus.RUNNING, allocation=Allocation.whole(held)))
    statuses = (JobStatus.QUEUED, JobStatus.SUSPENDED, JobStatus.PREEMPTED)
    for i in range(rng.randint(1, 5)):
        views.append(make_view(make_job(f"w{i}", rng.randint(1, 2)), status=rng.choice(statuses)))
    snapshot = Snapshot(0.0, cluster, tuple(views), ConsolidatedPlacer(cluster))
    run = snapshot.allocations()
    stopped = [v for v in snapshot.running() if rng.random() < 0.5]
    for v in stopped:
        del run[v.job_id]
    all_gpus = [(n, g) for n in range(3) for g in range(4)]
    for v in snapshot.waiting():
        choice = rng.random()
        if choice < 0.4 and stopped:
            run[v.job_id] = rng.choice(stopped).allocation  # type: ignore[assignment]
        elif choice < 0.8:
            run[v.job_id] = Allocation.whole(rng.sample(all_gpus, v.spec.num_gpus))
    for v in snapshot.running():
        if v.job_id in run and rng.random() < 0.2:
            run[v.job_id] = Allocation.whole(rng.sample(all_gpus, v.spec.num_gpus))
    plan = Plan(run=run, suspend=frozenset(v.job_id for v in stopped))
    fast = _outcome(snapshot, plan, snapshot.free_pool())
    assert fast == _outcome(snapshot, plan, _host_tracking_pool(snapshot))


@pytest.mark.parametrize("batch", [None, 32])
def test_compile_plans_actions_equal_the_constructor(batch: int | None) -> None:
    view = make_view(make_job("a", 2))
    alloc = Allocation.whole([(0, 0), (0, 1)])
    fast = _job_action(view, Action.START, alloc, batch)
    built = JobAction(view, Action.START, alloc, batch)
    assert type(fast) is JobAction
    for name in JobAction.__slots__:
        assert getattr(fast, name) is getattr(built, name), name
    assert fast == built and hash(fast) == hash(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.batch_size = 1  # type: ignore[misc]
