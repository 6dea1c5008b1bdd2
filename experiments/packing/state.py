"""The free resources of a cluster of `NodeResources` as numpy arrays, and the filter.

Placers (`experiments.packing.placers`) read it to score nodes over the whole cluster
at once and `experiments.packing.experiment` applies their choices with `assign`.
A node's GPUs are columns of `gpu_left_milli` (nodes x the largest node's GPUs);
columns past a node's GPUs hold 0 and so never fit a request nor count as idle.
`fits` is Kubernetes' filter for a pod: CPU and memory (NodeResourcesFit), the GPU
model and enough GPU capacity on single GPUs (open-gpu-share's Filter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from experiments.packing.resources import MILLI_PER_GPU, NodeResources, TaskRequest

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a task goes: a node and the GPUs (indices on it) it takes."""

    node: int
    gpus: tuple[int, ...]


class ClusterState:
    """Free CPU, memory and per-GPU milli-GPUs of every node; mutated by `assign`."""

    def __init__(self, nodes: Sequence[NodeResources]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.nodes = tuple(nodes)
        width = max(1, max(node.gpus for node in nodes))
        self.cpu_left = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.mem_left = np.array([n.memory_mib for n in nodes], dtype=np.int64)
        self.gpu_count = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.gpu_left_milli = np.zeros((len(nodes), width), dtype=np.int64)
        for i, node in enumerate(nodes):
            self.gpu_left_milli[i, : node.gpus] = MILLI_PER_GPU
        self.models = tuple(sorted({n.gpu_model for n in nodes}))
        self.model_index = np.array([self.models.index(n.gpu_model) for n in nodes])
        self.gpu_capacity_milli = int(self.gpu_count.sum()) * MILLI_PER_GPU
        self.allocated_milli = 0
        # GPU tasks per node by kind, as GPU clustering reads them: column 0 counts
        # GPU shares, column k tasks of k whole GPUs.
        self.gpu_tasks = np.zeros((len(nodes), width + 1), dtype=np.int64)
        self._accepted: dict[frozenset[str], BoolArray] = {}

    def accepted(self, task: TaskRequest) -> BoolArray:
        """Nodes whose GPU model the task accepts (all nodes for a CPU task)."""
        key = task.gpu_models if task.num_gpus else frozenset({"*"})
        hit = self._accepted.get(key)
        if hit is None:
            by_model = np.array([task.accepts(m) for m in self.models], dtype=np.bool_)
            hit = self._accepted[key] = by_model[self.model_index]
        return hit

    def fits(self, task: TaskRequest) -> BoolArray:
        """Nodes that can hold the task now: the scheduler's filter."""
        mask = (self.cpu_left >= task.cpu_milli) & (self.mem_left >= task.memory_mib)
        if task.num_gpus:
            enough = (self.gpu_left_milli >= task.gpu_milli).sum(axis=1) >= task.num_gpus
            mask &= enough & self.accepted(task)
        return mask

    def free_gpus(self, node: int) -> tuple[int, ...]:
        """The node's whole free GPUs, lowest index first."""
        row = self.gpu_left_milli[node, : self.gpu_count[node]]
        return tuple(int(g) for g in np.flatnonzero(row == MILLI_PER_GPU))

    def assign(self, task: TaskRequest, placement: Placement) -> None:
        """Take the task's resources on the placement's node and GPUs."""
        node = placement.node
        if len(placement.gpus) != task.num_gpus:
            raise ValueError(f"task {task.name!r} needs {task.num_gpus} GPUs")
        for gpu in placement.gpus:
            if (
                not 0 <= gpu < self.gpu_count[node]
                or self.gpu_left_milli[node, gpu] < task.gpu_milli
            ):
                raise ValueError(f"GPU {gpu} of node {node} cannot hold task {task.name!r}")
        if self.cpu_left[node] < task.cpu_milli or self.mem_left[node] < task.memory_mib:
            raise ValueError(f"node {node} cannot hold task {task.name!r}")
        self.cpu_left[node] -= task.cpu_milli
        self.mem_left[node] -= task.memory_mib
        for gpu in placement.gpus:
            self.gpu_left_milli[node, gpu] -= task.gpu_milli
        self.allocated_milli += task.total_gpu_milli
        if task.num_gpus:
            self.gpu_tasks[node, gpu_task_kind(task)] += 1


def gpu_task_kind(task: TaskRequest) -> int:
    """The column of `ClusterState.gpu_tasks` for a GPU task: 0 a share, else its GPUs."""
    return 0 if task.is_share else task.num_gpus
