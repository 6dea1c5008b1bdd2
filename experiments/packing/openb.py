"""The openb files as FGD's placement experiment reads them: every resource kept.

openb (Weng et al., USENIX ATC 2023; cluster-trace-gpu-v2023) as the replay reads it
is `controller.traces.formats.alibaba`; this experiment keeps more. `load_openb_tasks` reads
each pod of `openb_pod_list_*.csv`, CPU pods and never-scheduled ones included (FGD
samples from the whole list), as a `TaskRequest` (CPU, memory, GPUs or milli-GPU
share, `gpu_spec` models split on "|"), and `load_openb_node_resources` each node of
`openb_node_list_*.csv` as `NodeResources` (CPU, memory, GPUs and their model). A
malformed file raises `controller.traces.TraceError` naming the line and field.

Called by `gpuflow placement` (gpuflow/placement_cmd.py) and bench/fgd.py.
"""

from __future__ import annotations

from pathlib import Path

from controller.traces.rows import read_table
from controller.traces.trace import TraceError
from experiments.packing.resources import (
    MILLI_PER_GPU,
    NodeResources,
    ResourceError,
    TaskRequest,
)


def load_openb_tasks(path: str | Path) -> list[TaskRequest]:
    """Every pod of an openb pod list with all it asks for (module docstring)."""
    path = Path(path)
    tasks: list[TaskRequest] = []
    seen: set[str] = set()
    required = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
    for row in read_table(path, required=required):
        name = row.text("name")
        if not name or name in seen:
            raise row.fail("name", f"missing or duplicate pod name {name!r}")
        seen.add(name)
        num_gpus = row.integer("num_gpu", minimum=0)
        gpu_milli = row.optional_integer("gpu_milli", minimum=0) or 0
        if num_gpus == 0:
            gpu_milli = 0
        elif not 0 < gpu_milli <= MILLI_PER_GPU:
            raise row.fail(
                "gpu_milli", f"must be in 1..{MILLI_PER_GPU} for a GPU pod, got {gpu_milli}"
            )
        elif gpu_milli < MILLI_PER_GPU and num_gpus > 1:
            raise row.fail("gpu_milli", "a GPU share is only possible with num_gpu 1")
        models = frozenset(m.strip() for m in row.text("gpu_spec").split("|") if m.strip())
        tasks.append(
            TaskRequest(
                name=name,
                cpu_milli=row.integer("cpu_milli", minimum=0),
                memory_mib=row.integer("memory_mib", minimum=0),
                num_gpus=num_gpus,
                gpu_milli=gpu_milli,
                gpu_models=models,
            )
        )
    if not tasks:
        raise TraceError(path, None, None, "no pods")
    return tasks


def load_openb_node_resources(path: str | Path) -> list[NodeResources]:
    """Every node of an openb node list with its CPU, memory, GPUs and GPU model."""
    path = Path(path)
    nodes: list[NodeResources] = []
    seen: set[str] = set()
    for row in read_table(path, required=("sn", "cpu_milli", "memory_mib", "gpu")):
        name = row.text("sn")
        if not name or name in seen:
            raise row.fail("sn", f"missing or duplicate node name {name!r}")
        seen.add(name)
        model = row.text("model")
        model = "" if model.lower() == "nan" else model
        try:
            node = NodeResources(
                name=name,
                cpu_milli=row.integer("cpu_milli", minimum=0),
                memory_mib=row.integer("memory_mib", minimum=0),
                gpus=row.integer("gpu", minimum=0),
                gpu_model=model,
            )
        except ResourceError as exc:
            raise row.fail("model", str(exc)) from None
        nodes.append(node)
    if not nodes:
        raise TraceError(path, None, None, "no nodes")
    return nodes
