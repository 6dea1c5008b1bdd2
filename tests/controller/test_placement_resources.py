"""CPU, host memory and GPU model in placement (issue 17 part 1): the pool counts a
job's pods on each node, every replay placer keeps to the nodes that can hold a pod,
compile_plan refuses a start whose CPU does not fit, and the simulator says why a job
no node could hold never runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.actions import compile_plan
from controller.model import (
    NO_HOST,
    Allocation,
    Cluster,
    GpuPool,
    GpuType,
    HostRequest,
    JobSpec,
    JobStatus,
    Plan,
    PlanError,
    Reason,
    Snapshot,
)
from controller.placement import PLACERS, host_never_fits, make_placer
from controller.sim import Simulator
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_view

CORES = 1000  # milli-cores per core


def cpu_cluster(cores: list[int | None], gpus: int = 4, mem_mib: int | None = None) -> Cluster:
    """make_cluster's nodes with the given cores each (None: not stated)."""
    base = make_cluster(nodes=len(cores), gpus=gpus)
    nodes = tuple(
        replace(
            node,
            cpu_milli=None if c is None else c * CORES,
            host_mem_mib=None if c is None else mem_mib,
        )
        for node, c in zip(base.nodes, cores, strict=True)
    )
    return replace(base, nodes=nodes, _index={})


def cpu_job(job_id: str, gpus: int, cores: int, mem_mib: int = 0, **kw: object) -> JobSpec:
    return replace(make_job(job_id, gpus), cpu_milli=cores * CORES, host_mem_mib=mem_mib, **kw)


def test_pool_counts_a_pods_cpu_and_memory_on_each_node_and_gives_them_back() -> None:
    cluster = cpu_cluster([16, 16], mem_mib=64_000)
    pool = GpuPool.of_cluster(cluster)
    gang = Allocation.whole([(0, 0), (0, 1), (1, 0)]).with_host(HostRequest(10_000, 40_000))
    pool.take(gang)
    assert pool.host_free(0) == HostRequest(6_000, 24_000)
    assert pool.host_free(1) == HostRequest(6_000, 24_000)  # one pod per node, not per GPU
    second = Allocation.whole([(0, 2)]).with_host(HostRequest(8_000, 0))
    assert not pool.fits(second, None)  # 3 GPUs free on node 0, 6 cores
    with pytest.raises(ValueError):
        pool.take(second)
    pool.release(gang)
    assert pool.host_free(0) == HostRequest(16_000, 64_000)
    assert pool.fits(second, None)


def test_a_pool_of_nodes_that_state_no_cpu_tracks_none() -> None:
    pool = GpuPool.of_cluster(make_cluster(nodes=2, gpus=4))
    assert not pool.tracks_host and pool.host_free(0) is None
    huge = Allocation.whole([(0, 0)]).with_host(HostRequest(10**9, 10**9))
    assert pool.fits(huge, None)


def test_allocations_compare_by_their_gpus_alone() -> None:
    a = Allocation.whole([(0, 1)])
    assert a.with_host(HostRequest(1000, 0)) == a and a.with_host(NO_HOST) is a


# (node cores, job GPUs, job cores, nodes the job may land on). Node 0 has the GPUs
# every best-fit placer prefers (fewest free) but too little CPU.
CPU_CASES = [
    pytest.param([4, 32, 32], 1, 8, {1, 2}, id="1gpu-skips-cpu-poor-node"),
    pytest.param([4, 32, 32], 2, 8, {1, 2}, id="2gpu-skips-cpu-poor-node"),
    pytest.param([4, 4, 32], 4, 8, {2}, id="whole-node-only-where-cpu-fits"),
    pytest.param([4, 4, 4], 1, 8, set(), id="no-node-has-the-cpu"),
    pytest.param([None, 4, 4], 1, 8, {0}, id="node-stating-no-cpu-is-unlimited"),
]


@pytest.mark.parametrize("placer_name", sorted(PLACERS))
@pytest.mark.parametrize(("cores", "gpus", "job_cores", "allowed"), CPU_CASES)
def test_every_placer_keeps_a_pod_off_nodes_short_of_cpu(
    placer_name: str, cores: list[int | None], gpus: int, job_cores: int, allowed: set[int]
) -> None:
    cluster = cpu_cluster(cores)
    pool = GpuPool.of_cluster(cluster)
    pool.take(Allocation.whole([(0, 0), (0, 1)]))  # node 0 is the tightest fit
    job = cpu_job("j", gpus, job_cores)
    alloc = make_placer(placer_name, cluster, seed=1).place(pool, make_view(job), gpus)
    if not allowed:
        assert alloc is None
        return
    assert alloc is not None and set(alloc.nodes) <= allowed
    assert alloc.host == job.host and pool.fits(alloc, None)


@pytest.mark.parametrize("placer_name", sorted(PLACERS))
def test_cpu_runs_out_before_gpus(placer_name: str) -> None:
    """Two nodes of 8 GPUs and 16 cores; 1-GPU pods of 6 cores: 2 per node fit, the
    rest of the GPUs stay idle, and every placer says so by returning None."""
    cluster = cpu_cluster([16, 16], gpus=8)
    pool = GpuPool.of_cluster(cluster)
    placer = make_placer(placer_name, cluster, seed=2)
    placed = []
    for k in range(6):
        job = cpu_job(f"j{k}", 1, 6)
        alloc = placer.place(pool, make_view(job), 1)
        if alloc is None:
            break
        pool.take(alloc)
        placed.append(alloc)
    assert len(placed) == 4 and pool.total_free == 12
    assert sorted(a.nodes[0] for a in placed) == [0, 0, 1, 1]


@pytest.mark.parametrize("placer_name", sorted(PLACERS))
def test_a_gang_across_nodes_needs_a_pod_on_each(placer_name: str) -> None:
    """8 GPUs over nodes of 4: only nodes 1 and 2 have the pod's 10 cores."""
    cluster = cpu_cluster([8, 16, 16])
    pool = GpuPool.of_cluster(cluster)
    job = cpu_job("g", 8, 10)
    alloc = make_placer(placer_name, cluster, seed=3).place(pool, make_view(job), 8)
    assert alloc is not None and alloc.nodes == (1, 2)


@pytest.mark.parametrize("placer_name", sorted(PLACERS))
def test_every_placer_keeps_to_the_gpu_models_a_job_accepts(placer_name: str) -> None:
    base = make_cluster(nodes=3, gpus=4)
    t4 = GpuType("T4-16GB", 16_384, 0.0, 126.0)
    nodes = (base.nodes[0], replace(base.nodes[1], gpu_type=t4), base.nodes[2])
    cluster = replace(base, nodes=nodes, _index={})
    job = replace(make_job("m", 2), gpu_models=frozenset({"T4-16GB"}))
    alloc = make_placer(placer_name, cluster, seed=4).place(
        GpuPool.of_cluster(cluster), make_view(job), 2
    )
    assert alloc is not None and alloc.nodes == (1,)


def test_a_milli_gpu_share_is_placed_as_asked() -> None:
    cluster = make_cluster(nodes=1, gpus=2)
    job = replace(make_job("s", 1), gpu_milli=300)
    alloc = make_placer("fragmentation-aware", cluster).place(
        GpuPool.of_cluster(cluster), make_view(job), 1
    )
    assert alloc is not None and [s.fraction for s in alloc.shares] == [0.3]


def test_job_spec_refuses_bad_resource_requests() -> None:
    with pytest.raises(ValueError, match="cpu_milli"):
        replace(make_job("x", 1), cpu_milli=-1)
    with pytest.raises(ValueError, match="gpu_milli"):
        replace(make_job("x", 1), gpu_milli=1500)
    with pytest.raises(ValueError, match="needs 1 GPU"):
        replace(make_job("x", 2), gpu_milli=500)


def test_host_never_fits_names_what_no_node_has() -> None:
    cluster = cpu_cluster([8, 16], mem_mib=32_000)
    assert host_never_fits(cpu_job("a", 1, 16, 32_000), cluster) is None
    why = host_never_fits(cpu_job("b", 1, 17), cluster)
    assert why is not None and "17 CPU" in why
    why = host_never_fits(cpu_job("c", 1, 1, 40_000), cluster)
    assert why is not None and "40000 MiB" in why
    models = host_never_fits(replace(make_job("d", 1), gpu_models=frozenset({"A100"})), cluster)
    assert models is not None and "A100" in models


def test_compile_plan_refuses_a_policys_own_gpus_where_the_pod_cpu_does_not_fit() -> None:
    """A policy that picks GPUs itself (not through the placer) still cannot start a
    pod on a node short of CPU: the core stamps the job's request and checks it."""
    cluster = cpu_cluster([8, 32])
    running = make_view(
        cpu_job("r", 1, 6),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole([(0, 0)]).with_host(HostRequest(6_000, 0)),
    )
    waiting = make_view(cpu_job("w", 1, 4))
    snapshot = Snapshot(0.0, cluster, (running, waiting), make_placer("first-fit", cluster))
    ok = compile_plan(
        snapshot, Plan(run={"r": running.allocation, "w": Allocation.whole([(1, 0)])})
    )
    (start,) = [a for a in ok if a.starts]
    assert start.allocation is not None and start.allocation.host == HostRequest(4_000, 0)
    with pytest.raises(PlanError, match="milli-CPU"):
        compile_plan(snapshot, Plan(run={"r": running.allocation, "w": Allocation.whole([(0, 1)])}))


def test_simulator_says_why_a_job_no_node_can_hold_never_runs() -> None:
    cluster = cpu_cluster([8, 8])
    placer = make_placer("consolidated", cluster)
    sim = Simulator(
        cluster, [cpu_job("big", 1, 12), cpu_job("ok", 1, 4)], make_policy("fifo"), placer
    )
    result = sim.run()
    done = {o.job_id: o for o in result.jobs}
    assert done["big"].first_start_s is None and done["ok"].finish_s is not None
    reason = sim.reason_for("big")
    assert reason == Reason(
        "Unschedulable",
        "a worker pod needs 12 CPU and 0 MiB of memory; no node has that much allocatable",
    )
