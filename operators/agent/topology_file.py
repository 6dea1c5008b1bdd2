"""`gpuflow agent run --topology-file`: a node's GPUs from YAML, for machines without NVML.

The file holds node types in the cluster-spec format (controller/presets/*.yaml):

    node_types:
      dgx1-v100: {gpu: V100-SXM2-16GB, nic_gbps: 400, numa: [...], topology: |
        ...}

`gpu` names a GPU model as cluster specs do (the GPU catalogue's, by gpuflow's name or
the product name NVML reports, or presets/gpus.yaml's); `topology` is an
`nvidia-smi topo -m` matrix, else `gpus` gives a generic PCIe layout; `sharing`
(mps or time-slicing) overrides the agent's --sharing. The GPUs get deterministic
UUIDs from the node's name. A preset file can be used as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from controller.model import Gpu
from controller.model.cluster import parse_topology_matrix
from controller.model.gpus import GPU_CATALOG
from controller.model.sharing import DEFAULT_SHARING, SharingMode
from controller.spec.types import SHARING_MODES, gpu_uuid, pcie_topology
from controller.spec.yaml_spec import known_gpu
from operators.nodes import NodeGpus


class TopologyFileError(ValueError):
    pass


def load_topology_file(
    path: Path,
    node_name: str,
    node_type: str | None = None,
    sharing: SharingMode = DEFAULT_SHARING,
) -> NodeGpus:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TopologyFileError(f"{path}: {exc}") from None
    types: dict[str, Any] = doc.get("node_types") or {}
    if not types:
        raise TopologyFileError(f"{path}: no node_types")
    if node_type is None:
        if len(types) != 1:
            raise TopologyFileError(f"{path}: several node types; pick one with --node-type")
        node_type = next(iter(types))
    if node_type not in types:
        raise TopologyFileError(f"{path}: no node type {node_type!r} (has {', '.join(types)})")
    return _node_gpus(path, node_name, types[node_type], sharing)


def _node_gpus(path: Path, node_name: str, t: dict[str, Any], sharing: SharingMode) -> NodeGpus:
    gpu = known_gpu(str(t.get("gpu")))
    if gpu is None:
        raise TopologyFileError(f"{path}: unknown gpu {t.get('gpu')!r}")
    if "sharing" in t:
        if t["sharing"] not in SHARING_MODES:
            known = ", ".join(SHARING_MODES)
            raise TopologyFileError(f"{path}: unknown sharing {t['sharing']!r} (known: {known})")
        sharing = SharingMode(t["sharing"])
    if t.get("topology"):
        try:
            links = parse_topology_matrix(str(t["topology"]))
        except ValueError as exc:
            raise TopologyFileError(f"{path}: topology: {exc}") from None
        numa = tuple(t.get("numa") or (0,) * len(links))
    elif t.get("gpus"):
        links, numa = pcie_topology(int(t["gpus"]))
        numa = tuple(t.get("numa") or numa)
    else:
        raise TopologyFileError(f"{path}: needs 'topology' or 'gpus'")
    if len(numa) != len(links):
        raise TopologyFileError(f"{path}: {len(numa)} NUMA entries for {len(links)} GPUs")
    gpus = tuple(Gpu(i, gpu_uuid("agent", node_name, i), int(numa[i])) for i in range(len(links)))
    spec = GPU_CATALOG.by_name.get(gpu.name)
    product = spec.products[0] if spec else gpu.name
    nic_gbps = float(t.get("nic_gbps") or 100.0)
    return NodeGpus(gpu, gpus, links, nic_gbps, product, sharing=sharing)
