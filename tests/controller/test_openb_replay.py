"""A replay of an openb sample (pod list and node list as Alibaba publishes them)
where the nodes' CPUs run out before their GPUs (issue 17 part 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model import Reason
from controller.model.sharing import slowdown
from controller.placement import PLACERS, make_placer
from controller.records import ReplayResult
from controller.sim import Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.registry import POLICIES, make_policy
from tests.controller.traces.builders import write

NODES = """
    sn,cpu_milli,memory_mib,gpu,model
    openb-node-0001,32000,262144,8,G2
    openb-node-0002,32000,262144,8,G2
"""
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def pods(count: int, cpu_milli: int) -> str:
    """`count` 1-GPU pods of `cpu_milli`, all created at 0 and running 1,000 s."""
    rows = [f"pod-{k:02d},{cpu_milli},16384,1,1000,,LS,Succeeded,0,1000,0" for k in range(count)]
    return "\n".join([POD_HEADER, *rows]) + "\n"


def replay(
    tmp_path: Path, cpu_milli: int, placement: str, policy_name: str = "fifo"
) -> ReplayResult:
    cluster = load_cluster(str(write(tmp_path, "openb_node_list_gpu_node.csv", NODES)))
    trace = load_trace(write(tmp_path, "openb_pod_list_sample.csv", pods(12, cpu_milli)))
    policy = make_policy(policy_name)
    sim = Simulator(cluster, trace.jobs, policy, make_placer(placement, cluster))
    return sim.run()


@pytest.mark.parametrize("placement", sorted(PLACERS))
def test_cpu_runs_out_before_gpus(tmp_path: Path, placement: str) -> None:
    """12 cores a pod on nodes of 32: two pods a node, four at a time on 16 GPUs, so
    the 12 pods run in three waves and never more than 4 GPUs are allocated."""
    result = replay(tmp_path, 12_000, placement)
    starts = sorted(job.first_start_s for job in result.jobs if job.first_start_s is not None)
    assert len(starts) == 12
    waves = sorted(set(starts))
    assert len(waves) == 3 and [starts.count(t) for t in waves] == [4, 4, 4]
    assert max(sample.gpus_allocated for sample in result.timeline) == 4


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_keeps_within_the_nodes_cpu(tmp_path: Path, policy: str) -> None:
    """Policies that choose GPUs themselves too: they ask the GPU-choice filter
    (controller.model.gpu_choice.candidates), so no start's pods over-commit a node's CPU."""
    result = replay(tmp_path, 12_000, "consolidated", policy)
    assert max(sample.gpus_allocated for sample in result.timeline) == 4
    assert all(job.finish_s is not None for job in result.jobs)


def test_the_same_pods_asking_little_cpu_run_at_once(tmp_path: Path) -> None:
    result = replay(tmp_path, 2_000, "consolidated")
    assert {job.first_start_s for job in result.jobs} == {0.0}
    assert max(sample.gpus_allocated for sample in result.timeline) == 12


def test_a_pod_held_back_by_cpu_says_so(tmp_path: Path) -> None:
    cluster = load_cluster(str(write(tmp_path, "openb_node_list_gpu_node.csv", NODES)))
    trace = load_trace(write(tmp_path, "openb_pod_list_sample.csv", pods(6, 12_000)))
    sim = Simulator(cluster, trace.jobs, make_policy("fifo"), make_placer("consolidated", cluster))
    sim.advance(0.0)
    assert len(sim.running_usage()) == 4
    assert sim.reason_for("pod-05") == Reason(
        "WaitingForResources", "openb-node-0001: needs 12 CPU, 8 allocatable free"
    )


def test_shares_are_placed_and_slowed_by_the_traces_utilisation(tmp_path: Path) -> None:
    """Two pods of 300 milli-GPUs on a node of one GPU: each uses 0.3 of it (the
    trace's figure, not the catalogue's 0.8 for a model it does not name), so both
    run at once on shares of 0.3 and finish as the sharing model says of u = 0.3."""
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,32000,262144,1,G2\n"
    cluster = load_cluster(str(write(tmp_path, "openb_node_list_gpu_node.csv", nodes)))
    rows = [f"pod-{k},1000,1024,1,300,,LS,Succeeded,0,1000,0" for k in range(2)]
    trace = load_trace(write(tmp_path, "openb_pod_list_s.csv", "\n".join([POD_HEADER, *rows])))
    assert {job.gpu_util for job in trace.jobs} == {0.3}
    placer = make_placer("fragmentation-aware", cluster)
    result = Simulator(cluster, trace.jobs, make_policy("fifo"), placer).run()
    mode = cluster.nodes[0].sharing
    expected = 1000.0 * slowdown(mode, 0.3, 0.3, fraction=0.3)
    assert [job.first_start_s for job in result.jobs] == [0.0, 0.0]
    assert [job.jct_s for job in result.jobs] == pytest.approx([expected] * 2, rel=1e-6)
