"""FGD's placement experiment: tasks arrive until the cluster is over-asked; how much
GPU capacity does a placer manage to allocate?

Weng et al. (USENIX ATC 2023), §6.1 "Methodology": tasks are drawn with replacement
from the trace's task list until their GPU requests reach `inflate` times the
cluster's GPU capacity (1.3 in Fig. 9); they arrive one by one in that order and
never leave; a task that no node can hold fails. At every 10 points of arrived
workload (GPU requests so far / GPU capacity) it records the share of GPU capacity
allocated and the cluster's fragmentation F(M) (`experiments.packing.fragmentation`,
M learned from the whole task list), each in percent of the GPU capacity. Seeds
42, 43, … as in the authors' run scripts.

Deviation: the authors' simulator (`TunePodsByNodeTotalResource`) shuffles the whole
task list and then adds random copies until the target; here every task is drawn
with replacement, as the methodology states, with numpy's generator instead of Go's.
Each run also draws the node order that breaks ties (`experiments.packing.placers`).

Called by `gpuflow placement` (gpuflow/placement_cmd.py) and bench/fgd.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from experiments.packing.fragmentation import TargetWorkload, cluster_fragmentation_milli
from experiments.packing.registry import PACKERS
from experiments.packing.resources import MILLI_PER_GPU, NodeResources, TaskRequest
from experiments.packing.state import ClusterState, IntArray

FIRST_SEED = 42
CHECKPOINT_STEP_PCT = 10
# Tasks drawn per numpy call while sampling: a few thousand cover the default trace
# at 130 % in three calls and cost nothing when a small sample needs fewer.
_DRAW_BATCH = 4096


class UnknownPackerError(ValueError):
    """A placer name that is not one of `PACKERS`."""


@dataclass(frozen=True)
class SeedRun:
    """One seed's run: allocation and fragmentation (percent of GPU capacity) at each
    checkpoint of arrived workload (percent), failed tasks, tasks arrived, seconds."""

    seed: int
    alloc_pct: dict[int, float]
    fragmentation_pct: dict[int, float]
    failed_tasks: int
    tasks: int
    wall_s: float


@dataclass(frozen=True)
class ExperimentResult:
    """A placer's runs over several seeds; the means are what FGD's figures plot."""

    placer: str
    gpu_capacity: int
    runs: tuple[SeedRun, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(run.seed for run in self.runs)

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return tuple(self.runs[0].alloc_pct)

    def mean_alloc_pct(self) -> dict[int, float]:
        return {c: float(np.mean([r.alloc_pct[c] for r in self.runs])) for c in self.checkpoints}

    def mean_fragmentation_pct(self) -> dict[int, float]:
        return {
            c: float(np.mean([r.fragmentation_pct[c] for r in self.runs])) for c in self.checkpoints
        }

    @property
    def failed_tasks(self) -> float:
        return float(np.mean([r.failed_tasks for r in self.runs]))

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.runs)


def checkpoints_pct(inflate: float) -> tuple[int, ...]:
    """Arrived-workload checkpoints: every 10 points up to inflate x 100."""
    last = int(round(inflate * 100, 6)) // CHECKPOINT_STEP_PCT * CHECKPOINT_STEP_PCT
    return tuple(range(CHECKPOINT_STEP_PCT, last + 1, CHECKPOINT_STEP_PCT))


def sample_workload(
    tasks: Sequence[TaskRequest], capacity_milli: int, inflate: float, rng: np.random.Generator
) -> IntArray:
    """Indices into `tasks`, drawn with replacement, while their GPU requests stay
    within inflate x capacity (the task that would pass it is not drawn)."""
    gpu = np.array([t.total_gpu_milli for t in tasks], dtype=np.int64)
    if not gpu.any():
        raise ValueError("no task asks for a GPU: the workload cannot reach the GPU capacity")
    target = inflate * capacity_milli
    chosen: list[IntArray] = []
    total = 0
    while True:
        idx = rng.integers(len(tasks), size=_DRAW_BATCH)
        cum = total + np.cumsum(gpu[idx])
        over = np.flatnonzero(cum > target)
        if over.size:
            chosen.append(idx[: over[0]])
            return np.concatenate(chosen)
        chosen.append(idx)
        total = int(cum[-1])


def run_seed(
    nodes: Sequence[NodeResources],
    tasks: Sequence[TaskRequest],
    placer: str,
    seed: int,
    inflate: float,
    target: TargetWorkload | None = None,
) -> SeedRun:
    """One run of the experiment (module docstring) with `placer` and `seed`."""
    if placer not in PACKERS:
        known = ", ".join(sorted(PACKERS))
        raise UnknownPackerError(f"unknown placer {placer!r} (known: {known})")
    started = time.perf_counter()
    target = target or TargetWorkload.from_tasks(tasks)
    rng = np.random.default_rng(seed)
    state = ClusterState(nodes)
    capacity = state.gpu_capacity_milli
    order = sample_workload(tasks, capacity, inflate, rng)
    packer = PACKERS[placer](rng, target, rng.permutation(len(nodes)))
    checkpoints = checkpoints_pct(inflate)
    alloc: dict[int, float] = {}
    frag: dict[int, float] = {}
    arrived = failed = 0
    pending = list(checkpoints)

    def record(upto_milli: float) -> None:
        while pending and pending[0] * capacity / 100 < upto_milli:
            mark = pending.pop(0)
            alloc[mark] = 100.0 * state.allocated_milli / capacity
            frag[mark] = 100.0 * cluster_fragmentation_milli(state, target) / capacity

    for i in order:
        task = tasks[i]
        arrived += task.total_gpu_milli
        record(arrived)
        placement = packer.place(state, task)
        if placement is None:
            failed += 1
        else:
            state.assign(task, placement)
    record(float("inf"))
    return SeedRun(seed, alloc, frag, failed, len(order), time.perf_counter() - started)


def run_experiment(
    nodes: Sequence[NodeResources],
    tasks: Sequence[TaskRequest],
    placer: str,
    *,
    seeds: int = 10,
    inflate: float = 1.3,
) -> ExperimentResult:
    """`seeds` runs (seeds 42, 43, …) of `placer` on the cluster `nodes`."""
    target = TargetWorkload.from_tasks(tasks)
    runs = tuple(
        run_seed(nodes, tasks, placer, FIRST_SEED + k, inflate, target) for k in range(seeds)
    )
    gpus = sum(node.gpus for node in nodes)
    return ExperimentResult(placer, gpus, runs)


__all__ = [
    "MILLI_PER_GPU",
    "ExperimentResult",
    "SeedRun",
    "UnknownPackerError",
    "checkpoints_pct",
    "run_experiment",
    "run_seed",
    "sample_workload",
]
