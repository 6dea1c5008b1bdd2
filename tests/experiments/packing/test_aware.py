"""gpuflow's `fgd-cpu-aware` packer on hand-built nodes where its choice is known
and differs from FGD's, its CPU-stranding term and its learned mix."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.packing.aware import (
    MIX_REFRESH_TASKS,
    CpuAwareFgdPacker,
    LearnedMix,
    cpu_per_gpu_milli,
    node_waste_growth,
    piece_waste_by_cpu,
    piece_waste_milli,
    stranding_growth,
)
from experiments.packing.fragmentation import POPULARITY_THRESHOLD, TargetWorkload
from experiments.packing.placers import FgdPacker
from experiments.packing.state import ClusterState, Placement
from tests.experiments.packing.builders import make_node, make_task, used_state

# Three 1-GPU tasks of 8 cores to one CPU-only task of 16 cores: the mix asks
# (3 x 8,000 + 16,000) / (3 x 1,000) = 13.3 milli-cores per milli-GPU.
GPU_TASK = make_task(cpu=8_000)
CPU_TASK = make_task(gpus=0, cpu=16_000)
MIX_TASKS = [GPU_TASK] * 3 + [CPU_TASK]


def aware(seen: list = MIX_TASKS) -> CpuAwareFgdPacker:  # type: ignore[type-arg]
    unused = TargetWorkload.from_tasks([make_task()])  # the packer learns its own
    packer = CpuAwareFgdPacker(np.random.default_rng(0), unused, None)
    for task in seen[:-1]:
        packer.mix.observe(task)
    return packer


@pytest.fixture
def dgx_and_t4() -> ClusterState:
    # 8 GPUs with 64 cores (8 per GPU, short of the mix's 13.3) and 2 GPUs with 104.
    return ClusterState(
        [make_node("dgx", gpus=8, cpu=64_000), make_node("t4", gpus=2, cpu=104_000, model="T4")]
    )


def test_a_cpu_task_goes_to_the_cpu_rich_node_where_fgd_sees_a_tie(
    dgx_and_t4: ClusterState,
) -> None:
    target = TargetWorkload.from_tasks(MIX_TASKS)
    nodes = np.flatnonzero(dgx_and_t4.fits(CPU_TASK))
    # FGD: 48 cores left on the DGX still run every GPU kind, so F does not move
    # on either node (sigmoid(0) = 50) and the tie goes to the first node.
    fgd = FgdPacker(np.random.default_rng(0), target, None)
    assert fgd.scores(dgx_and_t4, CPU_TASK, nodes)[0].tolist() == [50, 50]
    assert fgd.place(dgx_and_t4, CPU_TASK) == Placement(0, ())
    # Ours: on the DGX the GPUs its CPU cannot feed grow from 8,000 - 64,000 / r =
    # 3,200 to 8,000 - 48,000 / r = 4,400 milli-GPUs: sigmoid(-1.2) x 100 = 23.
    packer = aware()
    assert packer.place(dgx_and_t4, CPU_TASK) == Placement(1, ())
    assert packer.scores(dgx_and_t4, CPU_TASK, nodes)[0].tolist() == [23, 50]


def test_stranding_growth_is_the_gpu_capacity_the_cpu_can_no_longer_feed(
    dgx_and_t4: ClusterState,
) -> None:
    r = cpu_per_gpu_milli(TargetWorkload.from_tasks(MIX_TASKS))
    assert r == pytest.approx(40_000 / 3_000)
    nodes = np.array([0, 1])
    assert stranding_growth(dgx_and_t4, nodes, CPU_TASK, r).tolist() == pytest.approx([1200, 0])
    # A GPU task asking less CPU than r per GPU frees the DGX's CPU for the rest:
    # 7,000 - 56,000 / r = 2,800 after, against 3,200.
    growth = stranding_growth(dgx_and_t4, nodes, GPU_TASK, r)
    assert growth.tolist() == pytest.approx([-400, 0])


def test_a_share_goes_where_fragmentation_and_stranding_together_grow_least() -> None:
    # Two nodes of 2 GPUs, each with a 500 share on GPU 0; the first has 8 cores,
    # the second 40. A 400 share on either GPU 1 leaves F as it is (600 and 500 free
    # on the GPUs still hold every kind), so FGD takes the first node.
    nodes = [make_node("short", gpus=2, cpu=8_000), make_node("rich", gpus=2, cpu=40_000)]
    state = used_state(nodes, [(0, 0, 500), (1, 0, 500)])
    share = make_task(milli=400, cpu=4_000)
    seen = [make_task(milli=500, cpu=4_000)] * 3 + [share]
    fgd = FgdPacker(np.random.default_rng(0), TargetWorkload.from_tasks(seen), None)
    assert fgd.place(state, share) == Placement(0, (1,))
    # r = 4,000 / 475 milli-cores per milli-GPU: the short node's 8 cores feed 950
    # of its 1,500 free milli-GPUs (550 stranded), after the share its 4 cores feed
    # 475 of 1,100 (625): +75. The rich node feeds all. The look-ahead adds
    # 2 x (W(100) - W(500)) = 2 x (100 - 25) = +150 on both (test below):
    # sigmoid(-0.225) x 100 = 44 and sigmoid(-0.15) x 100 = 46.
    packer = aware(seen)
    assert packer.place(state, share) == Placement(1, (1,))
    nodes_ = np.array([0, 1])
    r = cpu_per_gpu_milli(packer.target)
    assert stranding_growth(state, nodes_, share, r).tolist() == pytest.approx([75, 0])
    assert packer.scores(state, share, nodes_)[0].tolist() == [44, 46]


def test_piece_waste_is_the_idle_a_piece_is_expected_to_keep() -> None:
    """Shares of 500 (3 in 4) and 400 (1 in 4), and a CPU task, which fills no GPU.
    W(L) = L where no share fits (L < 400); W(500) = 3/4 W(0) + 1/4 W(100) = 25;
    W(600) = 3/4 W(100) + 1/4 W(200) = 125; W(1000) = 3/4 W(500) + 1/4 W(600) = 50.
    With a reach of 1, a piece that only the 400s fit (P = 1/4) is reached one time
    in four: W(400) = 3/4 x 400 + 1/4 x W(0) = 300."""
    seen = [make_task(milli=500)] * 3 + [make_task(milli=400), CPU_TASK, CPU_TASK]
    target = TargetWorkload.from_tasks(seen, 1.0)
    waste = piece_waste_milli(target)  # reach 0.1: every piece some share fits is reached
    assert [waste[x] for x in (0, 100, 399, 400, 500, 600, 1000)] == pytest.approx(
        [0, 100, 399, 0, 25, 125, 50]
    )
    assert piece_waste_milli(target, reach=1.0)[400] == pytest.approx(300)


def test_the_mix_is_learned_from_the_tasks_that_asked() -> None:
    mix = LearnedMix()
    first = mix.observe(GPU_TASK)
    assert first.gpu_milli.tolist() == [1000]
    target = mix.observe(CPU_TASK)  # early on, rebuilt at every task
    assert sorted(target.num_gpus.tolist()) == [0, 1]
    assert target.share.tolist() == pytest.approx([0.5, 0.5])
    for _ in range(MIX_REFRESH_TASKS + 1):
        target = mix.observe(GPU_TASK)
    # Rebuilt at each of the first 64 tasks (63 GPU, 1 CPU), not at the next three.
    assert mix.counts.total() == MIX_REFRESH_TASKS + 3
    assert target.share.tolist() == pytest.approx([63 / 64, 1 / 64])
    # Every kind stays, however rare (FGD's 95 % cut would drop the CPU task).
    for _ in range(MIX_REFRESH_TASKS):
        target = mix.observe(GPU_TASK)
    assert target.share.tolist() == pytest.approx([127 / 128, 1 / 128])  # the 128th
    assert LearnedMix(POPULARITY_THRESHOLD).observe(GPU_TASK).num_gpus.tolist() == [1]


def test_the_look_ahead_by_cpu_lets_land_only_the_kinds_the_node_can_feed() -> None:
    """Shares of 500 with 2 cores (3 in 4) and of 400 with 6 (1 in 4): with 2 to 6
    cores (6 excluded) only the 500s land, so W(500) = W(1000) = 0 and W(400) = 400;
    with fewer than 2 nothing lands (W(L) = L); with 6 or more, `piece_waste_milli`."""
    seen = [make_task(milli=500, cpu=2_000)] * 3 + [make_task(milli=400, cpu=6_000), CPU_TASK]
    target = TargetWorkload.from_tasks(seen, 1.0)
    cpu, waste = piece_waste_by_cpu(target)
    assert cpu.tolist() == [2_000, 6_000]
    at = [100, 400, 500, 600, 1000]
    assert waste[0, at].tolist() == at
    assert waste[1, at].tolist() == pytest.approx([100, 400, 0, 100, 0])
    assert waste[2].tolist() == pytest.approx(piece_waste_milli(target).tolist())


def test_a_share_leaves_no_piece_on_a_node_it_takes_the_last_cores_of() -> None:
    # Shares of 500 with 4 cores (4 in 6), of 600 with 8 (1 in 6), a CPU task (1 in
    # 6). "short" has one GPU free and 4 cores, "rich" a GPU at 700 and one free and
    # 40 cores. On "short" the share takes the last cores: the 500 it leaves
    # free can never be used. F barely sees it (+167: the 500s lose their piece, the
    # 600s and the CPU task, which could not run there, see a smaller fragment), S
    # sees less stranded GPU (-129), and the look-ahead on the mix alone sees a piece
    # the 500s fill (W(500) - W(1000) = 0 - 80): cost -122, as on "rich" (-160):
    # sigmoid x 100 = 53 on both, and the tie went to "short".
    share = make_task(milli=500, cpu=4_000)
    seen = [share] * 3 + [make_task(milli=600, cpu=8_000), make_task(gpus=0), share]
    nodes = [make_node("short", gpus=2, cpu=4_000), make_node("rich", gpus=2, cpu=40_000)]
    state = used_state(nodes, [(0, 0, 1000), (1, 0, 300)])
    packer = aware(seen)
    assert packer.place(state, share) == Placement(1, (1,))
    # With its CPU: on "short" W goes from 0 (4 cores let the 500s land on the free
    # GPU) to 500 (no core left: nothing lands), ΔV = +500; on "rich" the free GPU
    # goes from W(1000) = 1/5 x W(400) = 80 (the 600s land one time in five among
    # the 1-GPU tasks, leaving 400 that nothing fits) to W(500) = 0.
    cpu, waste = packer.waste_by_cpu()
    growth = node_waste_growth(state, np.array([0, 1]), share, cpu, waste)
    assert growth[:, 1].tolist() == pytest.approx([500, -80])
    assert packer.scores(state, share, np.array([0, 1]))[0].tolist() == [26, 53]
