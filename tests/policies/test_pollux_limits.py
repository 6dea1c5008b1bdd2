"""Pollux's search sees the GPU-choice filter: per-job node masks and quota bounds
(policies/pollux/limits.py), against the search blind to them (`limits=False`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from controller.checks import check_plan
from controller.model import Allocation, JobSpec, JobStatus, JobView, Snapshot
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.placement import ConsolidatedPlacer
from controller.quotas.admission import Quotas
from policies.pollux import Pollux, PolluxState
from policies.pollux.limits import quota_bounds
from policies.pollux.partition import Part, part_bounds, sub_problem
from policies.pollux.search import Problem, QuotaBounds, search
from tests.builders import make_cluster, make_job, make_view
from tests.policies.invariants import two_types

NOW_S = 600.0


def _elastic(job_id: str, model: str, tenant: str = "default", submit_s: float = 0.0) -> JobSpec:
    return make_job(
        job_id,
        1,
        model=model,
        tenant=tenant,
        min_gpus=1,
        max_gpus=8,
        submit_s=submit_s,
        duration_s=3600.0,
    )


def _running(spec: JobSpec, gpus: list[tuple[int, int]], attained_gpu_s: float) -> JobView:
    return make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=Allocation.whole(gpus),
        now_s=NOW_S,
        done_iters=100.0,
        attained_gpu_s=attained_gpu_s,
    )


def test_a_job_refusing_a_nodes_gpu_model_is_placed_on_a_node_it_accepts() -> None:
    """n0 has the slow model, n1 the fast one; j accepts only the slow one. Blind to
    j's mask the search put it on n1 (its best goodput), the filter refused it, and
    j waited with 5 of 8 GPUs idle; seeing the mask, j runs on n0 and k moves to n1."""
    cluster = two_types(make_cluster(nodes=2, gpus=4))
    slow = cluster.nodes[0].gpu_type.name
    k = _running(replace(_elastic("k", "bert"), max_gpus=4), [(0, g) for g in range(4)], 2000.0)
    j = make_view(
        replace(_elastic("j", "cifar10", submit_s=500.0), gpu_models=frozenset({slow})),
        now_s=NOW_S,
    )
    snapshot = Snapshot(NOW_S, cluster, (k, j), ConsolidatedPlacer(cluster))
    blind = Pollux(limits=False).schedule(snapshot, None)
    assert "j" not in blind.run and blind.reasons["j"].code == "GpuModelRefused"
    assert sum(a.num_gpus for a in blind.run.values()) == 3
    plan = check_plan(snapshot, Pollux().schedule(snapshot, None), policy="pollux", strict=True)
    assert "j" in plan.run and plan.run["j"].nodes == (0,)
    assert plan.run["k"].nodes == (1,) and plan.run["k"].num_gpus == 4
    assert not plan.reasons


def test_a_job_no_node_takes_waits_with_the_filters_reason() -> None:
    """A job whose pod asks more CPU than any node has: the search, seeing its mask,
    gives it nothing, and it waits for the node's CPU, not for a goodput gain."""
    cluster = make_cluster(nodes=2, gpus=4)
    nodes = tuple(replace(n, cpu_milli=8000, host_mem_mib=65536) for n in cluster.nodes)
    cluster = replace(cluster, nodes=nodes)
    big = make_view(replace(_elastic("big", "cifar10"), cpu_milli=16000), now_s=NOW_S)
    small = make_view(replace(_elastic("small", "cifar10"), cpu_milli=1000), now_s=NOW_S)
    snapshot = Snapshot(NOW_S, cluster, (big, small), ConsolidatedPlacer(cluster))
    plan = Pollux().schedule(snapshot, None)
    check_plan(snapshot, plan, policy="pollux", strict=True)
    assert "big" not in plan.run and "small" in plan.run
    assert plan.reasons["big"].code == "WaitingForResources"
    assert "needs 16 CPU" in plan.reasons["big"].message


def test_a_leaf_at_its_limit_leaves_its_gpus_to_another_leafs_job() -> None:
    """Leaf a (limit 2) holds 2 with a1, which has least attained service and would
    scale to 4; leaf b has no limit. Blind to quotas the search gave a1 n0's four
    GPUs, the filter refused the gain (a1 kept its two) and two GPUs stayed idle; with
    the bounds a1 stays at 2 and b1 takes the two others."""
    cluster = make_cluster(nodes=2, gpus=4)
    a1 = _running(_elastic("a1", "imagenet", "a"), [(0, 0), (0, 1)], 100.0)
    b1 = _running(_elastic("b1", "imagenet", "b"), [(1, 0), (1, 1)], 2000.0)
    tree = QuotaTree(
        (
            QuotaNode("a", guarantee=GpuQuota.of(2), limit=GpuQuota.of(2)),
            QuotaNode("b", guarantee=GpuQuota.of(2)),
        )
    )
    snapshot = Snapshot(NOW_S, cluster, (a1, b1), ConsolidatedPlacer(cluster))
    state = PolluxState((), {"a1": 4, "b1": 4})  # both may double to 8 (growth cap)
    plans = {}
    for limits in (False, True):
        policy = Pollux(limits=limits)
        admitted = Quotas(tree).admit(snapshot, policy.queue_order(snapshot, None))
        plan = policy.schedule(admitted.seen, state)
        room = admitted.seen.quota_room
        plans[limits] = check_plan(snapshot, plan, policy="pollux", strict=True, quota=room)
    blind, seeing = plans[False], plans[True]
    assert {k: a.num_gpus for k, a in blind.run.items()} == {"a1": 2, "b1": 4}
    assert {k: a.num_gpus for k, a in seeing.run.items()} == {"a1": 2, "b1": 6}


def _problem(
    base: np.ndarray,
    capacity: np.ndarray,
    kdim: int,
    quota: QuotaBounds,
    cell_cap: np.ndarray | None = None,
) -> Problem:
    """A search over `base`'s jobs, each of 1-8 GPUs with speedup sqrt(GPUs) on any
    number of nodes (up to 2), under `quota` and `cell_cap`."""
    jobs = base.shape[0]
    return Problem(
        capacity=capacity,
        base=base,
        lo=np.ones(jobs, np.float32),
        hi=np.full(jobs, 8, np.float32),
        speedup=np.tile(np.sqrt(np.arange(kdim)), jobs * 3),
        ndim=3,
        kdim=kdim,
        restart_factor=np.ones(jobs),
        p=-1.0,
        avoid_interference=False,
        cell_cap=cell_cap,
        quota=quota,
    )


def test_repair_cuts_masked_cells_and_the_latest_jobs_of_a_bound_first() -> None:
    """Three jobs on two nodes of 4 GPUs; job 0 may not have new GPUs on node 1 (it
    holds one there), and jobs 0 and 2 share a bound of 3 GPUs in all."""
    jobs, nodes, kdim = 3, 2, 9
    base = np.zeros((jobs, nodes), np.float32)
    base[0, 1] = 1.0
    cell_cap = np.full((jobs, nodes), 4.0, np.float32)
    cell_cap[0, 1] = 1.0
    quota = QuotaBounds(
        members=np.array([[1, 0, 1]], np.float32),
        nodes=np.ones((1, nodes), np.float32),
        bound=np.array([3.0], np.float32),
        gains=np.array([False]),
    )
    problem = _problem(base, np.array([4, 4], np.float32), kdim, quota, cell_cap)
    states = np.array([[[1, 3], [1, 0], [2, 1]], [[0, 4], [0, 0], [0, 4]]], np.float32)
    rng = np.random.default_rng(0)
    result = search(problem, states, population_size=2, generations=0, patience=0, rng=rng)
    fixed = sorted(result.population.tolist())
    # 1st state: job 0 cut to [1, 1] (the mask), job 2 then to the bound's last 1 GPU;
    # 2nd: job 0 keeps its 1 GPU on node 1, job 2 gets the 2 left of the bound.
    assert fixed == sorted([[[1, 1], [1, 0], [1, 0]], [[0, 1], [0, 0], [0, 2]]])
    for state in result.population:
        assert (state <= cell_cap).all()
        assert state[[0, 2]].sum() <= 3


def test_blocks_searched_in_turn_share_a_quota_bound() -> None:
    """Split search (policies/pollux/partition.py): four jobs on four nodes of 4 GPUs,
    in two blocks, all four jobs under one bound of 6 GPUs. The second block's jobs
    hold 3 now: the first block may use 3; once it used 2, the second may use 4."""
    jobs, nodes, kdim = 4, 4, 9
    base = np.zeros((jobs, nodes), np.float32)
    base[2, 2] = base[3, 3] = 1.0
    base[3, 2] = 1.0  # job 3 spans blocks: it moves, its GPUs still count for now
    quota = QuotaBounds(
        members=np.ones((1, jobs), np.float32),
        nodes=np.ones((1, nodes), np.float32),
        bound=np.array([6.0], np.float32),
        gains=np.array([False]),
    )
    problem = _problem(base, np.full(nodes, 4, np.float32), kdim, quota)
    first = Part(np.array([0, 1]), np.array([0, 1]))
    second = Part(np.array([2, 3]), np.array([2, 3]))
    whole = base.copy()
    sub = part_bounds(problem, sub_problem(problem, first), first, whole)
    assert sub.quota is not None and sub.quota.bound.tolist() == [3.0]
    whole[first.rows] = 0.0
    whole[0, 0] = whole[1, 1] = 1.0  # the first block's best: 2 GPUs
    sub = part_bounds(problem, sub_problem(problem, second), second, whole)
    assert sub.quota is not None and sub.quota.bound.tolist() == [4.0]
    assert sub.quota.members.shape == (1, 2) and sub.quota.nodes.shape == (1, 2)


def test_a_limit_bounds_a_quotas_gpus_after_the_round_not_its_gains() -> None:
    """Leaf a (limit 4) holds its 4 in a1 and a2: the search may move them between its
    jobs (the check counts a plan's releases before its gains), not add one."""
    cluster = make_cluster(nodes=2, gpus=4)
    a1 = _running(_elastic("a1", "imagenet", "a"), [(0, 0), (0, 1)], 100.0)
    a2 = _running(_elastic("a2", "imagenet", "a"), [(1, 0), (1, 1)], 2000.0)
    tree = QuotaTree((QuotaNode("a", guarantee=GpuQuota.of(4), limit=GpuQuota.of(4)),))
    snapshot = Snapshot(NOW_S, cluster, (a1, a2), ConsolidatedPlacer(cluster))
    room = Quotas(tree).admit(snapshot).seen.quota_room
    assert room is not None
    base = np.array([[2, 0], [0, 2]], np.float32)
    bounds = quota_bounds(room, (a1, a2), base, np.array([4, 4], np.float32))
    (limit,) = [c for c in range(len(bounds.bound)) if bounds.bound[c] == 4.0]
    assert not bounds.gains[limit] and bounds.members[limit].tolist() == [1.0, 1.0]
    swap = np.array([[[4, 0], [0, 0]], [[4, 0], [0, 1]]], np.float32)  # 4 moved; 5
    assert bounds.usage(swap, base)[:, limit].tolist() == [4.0, 5.0]
