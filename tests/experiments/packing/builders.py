"""Builders for the resource-aware placement tests: nodes, tasks, a used cluster."""

from __future__ import annotations

from collections.abc import Sequence

from experiments.packing.resources import NodeResources, TaskRequest
from experiments.packing.state import ClusterState, Placement


def make_node(
    name: str, *, gpus: int = 8, cpu: int = 64_000, mem: int = 256 * 1024, model: str = "V100M16"
) -> NodeResources:
    return NodeResources(name, cpu, mem, gpus, model if gpus else "")


def make_task(
    *,
    gpus: int = 1,
    milli: int | None = None,
    cpu: int = 4_000,
    mem: int = 8 * 1024,
    models: Sequence[str] = (),
    name: str = "t",
) -> TaskRequest:
    if milli is None:
        milli = 1000 if gpus else 0
    return TaskRequest(name, cpu, mem, gpus, milli, frozenset(models))


def used_state(
    nodes: Sequence[NodeResources], taken: Sequence[tuple[int, int, int]]
) -> ClusterState:
    """A cluster where each (node, GPU, milli) has been taken by a share task."""
    state = ClusterState(nodes)
    for node, gpu, milli in taken:
        task = make_task(milli=milli, cpu=0, mem=0) if milli < 1000 else make_task(cpu=0, mem=0)
        state.assign(task, Placement(node, (gpu,)))
    return state
