"""The existing policies on a cluster of several GPU types (issue 31, item 3): Tiresias,
Gandiva, Optimus, FIFO and SRTF place a job on the type that runs it fastest with room
(with no throughput matrix: the catalogue's and the performance model's speeds), Optimus
estimates with the rate on that type, and Pollux searches goodput per type, each
against the same case blind to types, where the slow type comes first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.model import Allocation, Cluster, GpuType, JobSpec, JobStatus, JobView, Snapshot
from controller.model.gpu_choice.gpu_type import FastestTypePlacer, type_placer
from controller.model.perf.matrix import ModelTypeRates
from controller.placement import ConsolidatedPlacer
from controller.spec import load_cluster
from policies.optimus.cluster import Profiler
from policies.pollux.partition import Part, sub_problem
from policies.pollux.search import Problem, job_speedups
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_typed_cluster, make_view
from tests.policies.invariants import check_round

ROOT = Path(__file__).resolve().parents[2]
SLOW = GpuType("SLOW-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=0.5)
FAST = GpuType("FAST-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=2.0)
# The policies that place a job on its fastest type (FIFO and SRTF since issue 31's
# item 4, with no throughput matrix as with one).
PLACING = ["tiresias", "gandiva", "optimus", "fifo", "srtf"]
# The slow server first: a placer blind to types takes node 0.
TWO_TYPES = make_typed_cluster((SLOW, 1), (FAST, 1))


def snapshot(*views: JobView, cluster: Cluster = TWO_TYPES) -> Snapshot:
    return Snapshot(now_s=0.0, cluster=cluster, jobs=views, placer=ConsolidatedPlacer(cluster))


def nodes(alloc: Allocation | None) -> set[int]:
    assert alloc is not None
    return {share.node for share in alloc.shares}


@pytest.mark.parametrize("policy", PLACING)
def test_the_first_job_takes_the_fast_type_and_the_next_the_slow_one(policy: str) -> None:
    first = make_view(make_job("a", 4, submit_s=0.0))
    second = make_view(make_job("b", 4, submit_s=1.0))
    plan = check_round(make_policy(policy), snapshot(first, second))
    assert nodes(plan.run.get("a")) == {1}
    assert nodes(plan.run.get("b")) == {0}


@pytest.mark.parametrize("policy", PLACING)
def test_blind_to_types_the_first_job_takes_the_first_server(policy: str) -> None:
    first = make_view(make_job("a", 4, submit_s=0.0))
    plan = check_round(make_policy(policy, aware=False), snapshot(first))
    assert nodes(plan.run.get("a")) == {0}


@pytest.mark.parametrize("policy", PLACING)
def test_a_job_that_fits_neither_type_alone_spans_them(policy: str) -> None:
    plan = check_round(make_policy(policy), snapshot(make_view(make_job("a", 6))))
    assert nodes(plan.run.get("a")) == {0, 1}


def test_tiresias_consolidates_a_skewed_job_within_one_type() -> None:
    """8 GPUs of a skewed model (VGG: on the fewest servers, 2 of 4, Tiresias §3.3) with
    fast servers 0, 3 and 4 (4, 2 and 2 GPUs free) and slow servers 1 and 2 (4 each):
    the fast GPUs span three servers, so it takes the two slow servers whole, not the
    emptiest two of any type (0 and 1, where it would run at the slow speed across
    types); a model that is not skewed takes the fast GPUs over three servers."""
    cluster = make_typed_cluster((FAST, 1), (SLOW, 2), (FAST, 2))
    busy = [
        make_view(
            make_job(f"busy{n}", 2),
            status=JobStatus.RUNNING,
            allocation=Allocation.whole([(n, 0), (n, 1)]),
        )
        for n in (3, 4)
    ]
    skewed = make_view(make_job("vgg", 8, submit_s=1.0, model="vgg16"))
    plan = check_round(make_policy("tiresias"), snapshot(*busy, skewed, cluster=cluster))
    assert nodes(plan.run.get("vgg")) == {1, 2}
    plain = make_view(make_job("resnet", 8, submit_s=1.0))
    plan = check_round(make_policy("tiresias"), snapshot(*busy, plain, cluster=cluster))
    assert nodes(plan.run.get("resnet")) == {0, 3, 4}


@pytest.mark.parametrize("policy", PLACING)
def test_on_one_type_the_policy_places_as_the_placer_does(policy: str) -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    snap = snapshot(make_view(make_job("a", 4)), cluster=cluster)
    assert type_placer(snap) is snap.placer
    plan = check_round(make_policy(policy), snap)
    assert nodes(plan.run.get("a")) == {0}


def test_type_placer_wraps_once() -> None:
    snap = snapshot(make_view(make_job("a", 1)))
    wrapped = type_placer(snap)
    assert isinstance(wrapped, FastestTypePlacer)
    assert type_placer(snap.with_placer(wrapped)) is wrapped


def test_optimus_profiles_a_job_on_its_fastest_type() -> None:
    """The speed Optimus estimates with at each size is the fast type's where that type
    has the GPUs, and the one across types where it does not (6 GPUs)."""
    spec = make_job("a", 4, min_gpus=1, max_gpus=8)
    rates = ModelTypeRates(TWO_TYPES)
    speeds = dict(Profiler(TWO_TYPES, rates).profile(make_view(spec)))
    fast = rates.type_rate_ips(spec, "FAST-16GB", 4)
    slow = rates.type_rate_ips(spec, "SLOW-16GB", 4)
    assert fast is not None and slow is not None and fast > 3.0 * slow
    assert speeds[4] == pytest.approx(fast)
    assert speeds[1] == pytest.approx(rates.type_rate_ips(spec, "FAST-16GB", 1))
    blind = dict(Profiler(TWO_TYPES).profile(make_view(spec)))
    assert blind[4] == pytest.approx(slow)  # node 0's type, the slow one
    assert speeds[8] == pytest.approx(blind[8])  # both servers: the slow GPUs bound it


def test_optimus_keeps_a_running_job_where_it_is() -> None:
    """A job running on the slow type at the size it keeps is not moved to the free
    fast type (Optimus §4.2: a job that keeps its size keeps its GPUs)."""
    on_slow = Allocation.whole((0, g) for g in range(4))
    view = make_view(make_job("a", 4), status=JobStatus.RUNNING, allocation=on_slow)
    plan = check_round(make_policy("optimus"), snapshot(view))
    assert plan.run["a"] == on_slow


def pollux_jobs(count: int) -> tuple[JobView, ...]:
    return tuple(
        make_view(
            JobSpec(
                job_id=f"p{i}",
                submit_s=float(i),
                num_gpus=1,
                min_gpus=1,
                max_gpus=8,
                model="cifar10",
                iterations=10000.0,
            )
        )
        for i in range(count)
    )


def test_pollux_aware_starts_jobs_on_the_fast_type_and_blind_on_the_first_node() -> None:
    """Two new jobs, one GPU each (Pollux's exploration cap): aware of types, both go
    to the fast server; blind, every GPU looks the same and both stay where the
    greedy seed put them, on node 0's slow GPUs."""
    snap = snapshot(*pollux_jobs(2))
    aware = check_round(make_policy("pollux"), snap)
    assert [nodes(aware.run.get(f"p{i}")) for i in range(2)] == [{1}, {1}]
    blind = check_round(make_policy("pollux", aware=False), snap)
    assert [nodes(blind.run.get(f"p{i}")) for i in range(2)] == [{0}, {0}]


def test_pollux_aware_chooses_types_on_three_types() -> None:
    """On a server each of T4, V100 and A100 (the benchmark's types), four new jobs of
    one GPU start on the A100s."""
    cluster = load_cluster(str(ROOT / "examples/clusters/t4-v100-a100.yaml"))
    snap = snapshot(*pollux_jobs(4), cluster=cluster)
    plan = check_round(make_policy("pollux"), snap)
    a100 = {i for i, n in enumerate(cluster.nodes) if n.gpu_type.name.startswith("A100")}
    for i in range(4):
        assert nodes(plan.run.get(f"p{i}")) <= a100


def typed_problem(tables: list[list[float]], onehot: list[list[float]]) -> Problem:
    """Jobs whose speedup tables are constant, one value per slot (each type's, then
    the spanning one), on nodes of one GPU each of the types `onehot` gives."""
    ndim = kdim = 3
    jobs, nodes = len(tables), len(onehot)
    flat = np.array([[np.full((ndim, kdim), v) for v in row] for row in tables])
    return Problem(
        capacity=np.ones(nodes, np.float32),
        base=np.zeros((jobs, nodes), np.float32),
        lo=np.ones(jobs, np.float32),
        hi=np.full(jobs, 2.0, np.float32),
        speedup=flat.ravel(),
        ndim=ndim,
        kdim=kdim,
        restart_factor=np.ones(jobs),
        p=-1.0,
        avoid_interference=True,
        type_onehot=np.array(onehot, np.float32),
        type_factor=np.array([[0.25, 1.0]] * jobs),
    )


def test_pollux_reads_a_rows_own_type_and_the_slowest_where_it_spans_types() -> None:
    """One job, two nodes of types 0 and 1: its speedup is table 0's on node 0, table
    1's on node 1, and on both the spanning table's times the slower type's factor."""
    problem = typed_problem([[1.0, 3.0, 2.0]], [[1.0, 0.0], [0.0, 1.0]])
    states = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]], [[0.0, 0.0]]], np.float32)
    assert job_speedups(problem, states)[:, 0] == pytest.approx([1.0, 3.0, 0.5, 0.0])


def test_a_split_search_keeps_each_jobs_tables_and_each_nodes_type() -> None:
    """A block of the search split at scale (pollux_partition.sub_problem) of job 1
    over nodes 1 and 2 (types 1 and 0) reads job 1's own tables by those types."""
    problem = typed_problem(
        [[1.0, 3.0, 2.0], [5.0, 7.0, 6.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    )
    sub = sub_problem(problem, Part(np.array([1]), np.array([1, 2])))
    states = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]], np.float32)
    assert job_speedups(sub, states)[:, 0] == pytest.approx([7.0, 5.0, 1.5])
