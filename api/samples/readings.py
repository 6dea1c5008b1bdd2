"""Each GPU's memory, temperature, power and ECC health as each mode knows them.

Called by api.samples.sampler at every sample through `readings_for(backend)`:

- cluster mode: what each node's agent last published in its `gpuflow.dev/gpu-status`
  annotation (operators/agent/discovery.py `gpu_status`: NVML's memory used and total,
  temperature, power draw, uncorrected ECC errors and health), read from the Node
  cache of the backend's follower; GPUs by UUID, as api.cluster_mode.describe reads their
  utilisation. A node whose agent has not published has no readings (not known).
- local mode: the simulator models no temperature, power or ECC; a GPU's memory used
  is what the jobs on it reserve, each its gpu_mem_mib (or, when it states none, its
  share of the GPU's memory), and its total the GPU model's; a GPU of a down node is
  unhealthy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from api.backends import JobBackend, LocalBackend
from api.cluster_mode.backend import ClusterModeBackend
from api.samples.rows import GpuReading, Readings
from api.schemas.cluster import NodePublic
from controller.model import Cluster
from operators import crd
from operators.kube import Obj
from operators.nodes import build_cluster

# Each sample's readings: from the described nodes and each unfinished job's
# gpu_mem_mib by id.
ReadingSource = Callable[[Sequence[NodePublic], Mapping[str, int | None]], Readings]


def readings_for(backend: JobBackend) -> ReadingSource:
    """The readings of `backend`'s mode."""
    if isinstance(backend, ClusterModeBackend):
        follower = backend.follower
        return lambda nodes, mem: agent_readings(follower.nodes.items())
    if isinstance(backend, LocalBackend):
        cluster = backend.local.live.cluster
        return lambda nodes, mem: local_readings(cluster, nodes, mem)
    return lambda nodes, mem: {}


def agent_readings(node_objs: Iterable[Obj]) -> Readings:
    """Node name -> GPU index -> reading, from the agents' gpu-status annotations."""
    objs = list(node_objs)
    view = build_cluster(objs)
    by_uuid = view.uuid_index()
    names = [n.name for n in view.cluster.nodes]
    out: dict[str, dict[int, GpuReading]] = {}
    for obj in objs:
        text = (obj["metadata"].get("annotations") or {}).get(crd.ANN_NODE_GPU_STATUS)
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            continue
        gpus = doc.get("gpus") if isinstance(doc, dict) else None
        for g in gpus if isinstance(gpus, list) else []:
            where = by_uuid.get(str(g.get("uuid"))) if isinstance(g, dict) else None
            if where is None:
                continue
            node, index = where
            out.setdefault(names[node], {})[index] = _agent_reading(g)
    return out


def _agent_reading(g: Mapping[str, Any]) -> GpuReading:
    return GpuReading(
        mem_used_mib=_int(g.get("memUsedMib")),
        mem_total_mib=_int(g.get("memTotalMib")),
        temperature_c=_int(g.get("temperatureC")),
        power_w=_float(g.get("powerW")),
        ecc_errors=_int(g.get("eccErrors")),
        healthy=g.get("healthy") is not False,
    )


def _int(value: object) -> int | None:
    figure = _float(value)
    return None if figure is None else int(figure)


def _float(value: object) -> float | None:
    """A JSON number (not a boolean); None for anything else, null included."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def local_readings(
    cluster: Cluster, nodes: Sequence[NodePublic], mem_of: Mapping[str, int | None]
) -> Readings:
    """Node name -> GPU index -> the memory its jobs reserve, for the simulated cluster."""
    out: dict[str, dict[int, GpuReading]] = {}
    for node, desc in zip(cluster.nodes, nodes, strict=True):
        total = node.gpu_type.mem_mib
        by_gpu: dict[int, GpuReading] = {}
        for gpu in desc.gpu_list:
            used = 0.0
            for share in gpu.shares:
                asked = mem_of.get(share.job) if share.job is not None else None
                used += asked if asked is not None else share.fraction * total
            by_gpu[gpu.index] = GpuReading(
                mem_used_mib=min(total, round(used)),
                mem_total_mib=total,
                healthy=desc.state != "down",
            )
        out[desc.name] = by_gpu
    return out
