"""Shared pieces of cluster specs: errors, node types, racks, assembly into a Cluster."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from controller.model.cluster import (
    Cluster,
    Gpu,
    GpuType,
    Node,
    PairLink,
    PcieLevel,
    Rack,
)
from controller.model.sharing import DEFAULT_SHARING, SharingMode

Links = tuple[tuple[PairLink | None, ...], ...]

RACK_SIZE = 16  # nodes per rack for PRESET:N, NODESxGPUS and CSV clusters
# Bounds on what a spec may ask for, so that a typo (an extra few zeros) is an error
# naming the field rather than minutes of building nodes: a large cluster today is
# tens of thousands of nodes; an NVLink domain at most a few hundred GPUs.
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 512
# Equal-cost links per rack or group uplink (ECMP lanes): about a switch's radix.
MAX_LANES = 64
# In all, 100,000 GPUs: the largest training clusters built today, 15 times the
# largest public trace's (Alibaba PAI, ~6,500). A replay holds its runner for the
# cluster's size: 200 jobs under FIFO take 4 s on 12500x8 but 27 s on 62500x16 (1M
# GPUs) on the dev machine, and the API runs settings.replay_concurrency at a time.
MAX_GPUS = 100_000
# The largest cluster spec file read: an openb node list of 100,000 nodes is ~5 MB.
MAX_SPEC_BYTES = 16 * 2**20
PRESET_NODES = 4  # nodes of a preset named without a count
GENERIC_GPU = "V100-PCIE-16GB"
# gpuflow's choice for generic servers: one 100 Gbit/s port (EDR InfiniBand or
# 100 GbE), the common fabric of V100-era GPU clusters.
GENERIC_NIC_GBPS = 100.0
# openb `model` column -> gpuflow GPU type (the GPU catalogue; G2/G3: presets/gpus.yaml).
OPENB_MODELS = {
    "V100M16": "V100-PCIE-16GB",
    "V100M32": "V100-PCIE-32GB",
    "P100": "P100-PCIE-16GB",
    "T4": "T4-16GB",
    "A10": "A10-24GB",
    "G2": "openb-G2",
    "G3": "openb-G3",
}
TIRESIAS_FIELDS = ("num_switch", "num_node_p_switch", "num_gpu_p_node")
OPENB_FIELDS = ("sn", "gpu", "model")
GPU_FIELDS = ("mem_mib", "nvlink_gbps", "pcie_gbps", "speed")
SHARING_MODES = tuple(m.value for m in SharingMode)
SHORTHAND = re.compile(r"(\d+)x(\d+)")
PRESET_COUNT = re.compile(r"(.+):(\d+)")


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be built: `{source}:{line}: field '{field}': {message}`,
    leaving out the parts that are unknown."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message, self.source, self.line, self.field = message, source, line, field
        where = ":".join(str(p) for p in (source, line) if p is not None)
        parts = [where] if where else []
        if field:
            parts.append(f"field '{field}'")
        super().__init__(": ".join([*parts, message]))


@dataclass(frozen=True, slots=True)
class NodeType:
    """A kind of server: what every node built from it shares."""

    name: str
    gpu_type: GpuType
    links: Links
    numa: tuple[int, ...]
    nic_gbps: float
    # Allocatable CPU (milli-cores) and host memory (MiB); None: not stated, unlimited.
    cpu_milli: int | None = None
    host_mem_mib: int | None = None
    # How jobs sharing a GPU run (controller.model.sharing); None: the cluster's mode.
    sharing: SharingMode | None = None


@dataclass(frozen=True, slots=True)
class RackPlan:
    name: str
    oversubscription: float
    nodes: tuple[tuple[str, NodeType], ...]  # (node name, type)
    uplinks: int = 1  # equal-cost links the uplink is split into (Rack.uplinks)


# --- node types and assembly --------------------------------------------------------------


def pcie_topology(num_gpus: int) -> tuple[Links, tuple[int, ...]]:
    """The GPU matrix and NUMA nodes of a generic PCIe server.

    GPUs go in pairs behind PCIe switches (PIX); the switches are split between two
    CPU sockets, the first half (rounded up) on socket 0. GPUs behind different
    switches of one socket reach each other through host bridges of that NUMA node
    (NODE, as nvidia-smi reports on dual-Xeon Skylake servers); across sockets, SYS.
    """
    switches = (num_gpus + 1) // 2
    on_socket0 = (switches + 1) // 2
    numa = tuple(0 if i // 2 < on_socket0 else 1 for i in range(num_gpus))

    def link(i: int, j: int) -> PairLink | None:
        if i == j:
            return None
        if i // 2 == j // 2:
            return PairLink(0, PcieLevel.PIX)
        return PairLink(0, PcieLevel.NODE if numa[i] == numa[j] else PcieLevel.SYS)

    links = tuple(tuple(link(i, j) for j in range(num_gpus)) for i in range(num_gpus))
    return links, numa


def uniform_cluster(name: str, node_type: NodeType, count: int, prefix: str = "node") -> Cluster:
    names = [f"{prefix}-{k}" for k in range(count)]
    racks = [
        RackPlan(f"r{r}", 1.0, tuple((n, node_type) for n in names[start : start + RACK_SIZE]))
        for r, start in enumerate(range(0, count, RACK_SIZE))
    ]
    return assemble(name, racks)


def assemble(
    name: str,
    racks: Sequence[RackPlan],
    source: str | None = None,
    sharing: SharingMode = DEFAULT_SHARING,
) -> Cluster:
    """The cluster of `racks`; `source` (default `name`) is what an error names;
    `sharing` the mode of nodes whose type states none."""
    total = sum(len(t.numa) for plan in racks for _, t in plan.nodes)
    if total > MAX_GPUS:
        raise ClusterSpecError(f"{total} GPUs in all: more than {MAX_GPUS}", source=source or name)
    nodes: list[Node] = []
    out_racks: list[Rack] = []
    for r, plan in enumerate(racks):
        nic_total = 0.0
        for node_name, t in plan.nodes:
            gpus = tuple(
                Gpu(i, gpu_uuid(name, node_name, i), t.numa[i]) for i in range(len(t.numa))
            )
            nodes.append(
                Node(
                    node_name,
                    r,
                    t.gpu_type,
                    gpus,
                    t.links,
                    t.nic_gbps,
                    t.cpu_milli,
                    t.host_mem_mib,
                    t.sharing or sharing,
                )
            )
            nic_total += t.nic_gbps
        out_racks.append(Rack(plan.name, nic_total / plan.oversubscription, uplinks=plan.uplinks))
    return Cluster(name, tuple(nodes), tuple(out_racks))


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuflow:{cluster}/{node}/{index}')}"
