"""FGD's fragmentation measure against hand-computed values, and the target workload."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.packing.fragmentation import TargetWorkload, cluster_fragmentation_milli
from experiments.packing.state import ClusterState, Placement
from tests.experiments.packing.builders import make_node, make_task, used_state


def mix(*kinds: tuple[int, int, int, float]) -> TargetWorkload:
    """(CPU, milli per GPU, GPUs, share) kinds."""
    return TargetWorkload(
        cpu_milli=np.array([k[0] for k in kinds], dtype=np.int64),
        gpu_milli=np.array([k[1] for k in kinds], dtype=np.int64),
        num_gpus=np.array([k[2] for k in kinds], dtype=np.int64),
        models=tuple(frozenset() for _ in kinds),
        share=np.array([k[3] for k in kinds]),
    )


@pytest.fixture
def state() -> ClusterState:
    # One node of 4 GPUs with 1000, 500, 300 and 0 milli-GPU free; 64 cores.
    return used_state([make_node("n", gpus=4)], [(0, 1, 500), (0, 2, 700), (0, 3, 1000)])


def test_node_fragmentation_is_the_expected_unusable_gpu_amount(state: ClusterState) -> None:
    # A 400-milli share can use the 1000 and the 500: fragment 300 (+ 0).
    # A whole GPU can use the free one: fragment 500 + 300.
    # A CPU task uses no GPU: all 1800 free milli-GPUs are a fragment to it.
    target = mix((1000, 400, 1, 0.5), (1000, 1000, 1, 0.25), (1000, 0, 0, 0.25))
    frag = target.node_fragmentation(state, np.array([0]))
    assert frag[0] == pytest.approx(0.5 * 300 + 0.25 * 800 + 0.25 * 1800)
    assert cluster_fragmentation_milli(state, target) == pytest.approx(800.0)


def test_a_kind_the_node_lacks_cpu_for_sees_every_idle_gpu_as_fragment(
    state: ClusterState,
) -> None:
    target = mix((1000, 400, 1, 0.5), (65_000, 1000, 1, 0.5))  # 65 cores > the node's 64
    assert target.node_fragmentation(state, np.array([0]))[0] == pytest.approx(
        0.5 * 300 + 0.5 * 1800
    )


def test_gradient_matches_the_measure_after_the_placement(state: ClusterState) -> None:
    target = mix((1000, 400, 1, 0.4), (1000, 1000, 2, 0.3), (2000, 0, 0, 0.3))
    nodes = np.array([0])
    for task in (make_task(milli=450, cpu=2000), make_task(cpu=3000), make_task(gpus=0)):
        growth = target.gradient(state, nodes, task)
        before = target.node_fragmentation(state, nodes)[0]
        gpus = [g for g in range(4) if state.gpu_left_milli[0, g] >= task.gpu_milli]
        for gpu in gpus if task.is_share else [None]:
            after_state = used_state(
                [make_node("n", gpus=4)], [(0, 1, 500), (0, 2, 700), (0, 3, 1000)]
            )
            placed = (gpu,) if task.is_share else after_state.free_gpus(0)[: task.num_gpus]
            after_state.assign(task, Placement(0, tuple(g for g in placed if g is not None)))
            after = target.node_fragmentation(after_state, nodes)[0]
            got = growth[0, gpu] if task.is_share else growth[0]
            assert got == pytest.approx(after - before)
        if task.is_share:
            assert np.isnan(growth[0, 2])  # 300 left: cannot hold 450


def test_target_workload_keeps_the_popular_kinds_and_renormalises() -> None:
    tasks = (
        [make_task(cpu=1000)] * 60
        + [make_task(milli=500, cpu=1000)] * 36
        + [make_task(gpus=0, cpu=1000)] * 3
        + [make_task(gpus=8, cpu=1000)]
    )
    target = TargetWorkload.from_tasks(tasks)
    # 60 % + 36 % = 96 % >= 95 %: the two most popular kinds, shares 60/96 and 36/96.
    assert target.gpu_milli.tolist() == [1000, 500]
    assert target.share.tolist() == pytest.approx([60 / 96, 36 / 96])
