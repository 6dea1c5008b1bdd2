"""The cluster: racks of nodes of GPUs, the links between GPUs and between nodes.

Built once by `controller.spec` (from YAML, a preset or a `NODESxGPUS` shorthand) or
by the Kubernetes backend from what node agents publish; read by every layer above.
Everything here is immutable; GPUs are referred to by `(node index, gpu index)`.

Bandwidths are unidirectional, in Gbit/s, everywhere in gpuflow (`*_gbps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import NamedTuple

from controller.model.sharing import DEFAULT_SHARING, SharingMode


class PcieLevel(IntEnum):
    """NVML's GPU topology levels (`nvmlGpuTopologyLevel_t`), nearest first.

    The names are those `nvidia-smi topo -m` prints for a GPU pair without NVLink.
    """

    PIX = 10  # NVML_TOPOLOGY_SINGLE: behind one PCIe switch
    PXB = 20  # NVML_TOPOLOGY_MULTIPLE: several PCIe switches, no host bridge
    PHB = 30  # NVML_TOPOLOGY_HOSTBRIDGE: through the CPU's PCIe host bridge
    NODE = 40  # NVML_TOPOLOGY_NODE: host bridges of one NUMA node
    SYS = 50  # NVML_TOPOLOGY_SYSTEM: across the CPU interconnect (QPI/UPI, xGMI)


# Fraction of a GPU's PCIe bandwidth that a peer-to-peer transfer reaches at each
# level. gpuflow's assumption, in the spirit of the measurements in Li et al.,
# "Evaluating Modern GPU Interconnect" (IEEE TPDS 2020), Fig. 6-8: P2P behind one
# switch runs at link speed, through host bridges it loses some, and across sockets
# it is staged through host memory at about half.
PCIE_LEVEL_EFFICIENCY: dict[PcieLevel, float] = {
    PcieLevel.PIX: 1.0,
    PcieLevel.PXB: 0.95,
    PcieLevel.PHB: 0.85,
    PcieLevel.NODE: 0.8,
    PcieLevel.SYS: 0.5,
}


@dataclass(frozen=True, slots=True)
class PairLink:
    """How two GPUs of one node talk: NVLink lanes (0 for none) and the PCIe path."""

    nvlinks: int
    pcie: PcieLevel

    def label(self) -> str:
        return f"NV{self.nvlinks}" if self.nvlinks else self.pcie.name


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model as the scheduler plans with it (the GPU catalogue's figures,
    controller.model.gpus, or a spec's own). `nvlink_gbps` is one NVLink lane, one
    direction."""

    name: str
    mem_mib: int
    nvlink_gbps: float
    pcie_gbps: float
    # Training throughput relative to a V100 (profiles are measured on V100s or
    # scaled to them), in TF32 (controller.model.precision); 1.0 where a spec gives
    # none. The fallback where no rate was measured for a model on this type
    # (controller.model.perf.gpu_speed).
    speed: float = 1.0


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    numa: int


class HostRequest(NamedTuple):
    """CPU in milli-cores and host memory in MiB: what a node has allocatable, or what
    one worker pod of a job asks on each node the job spans (one pod per node, as the
    operator runs them)."""

    cpu_milli: int = 0
    mem_mib: int = 0


NO_HOST = HostRequest()
# Free CPU or host memory of a node that states none: never runs short.
UNCONSTRAINED = 2**62


@dataclass(frozen=True, slots=True)
class Node:
    """A server: its GPUs, their pair links (`links[i][j]`) and its NIC, and the CPU
    (milli-cores) and host memory (MiB) its pods may request; None for a node that
    states none, whose CPU and memory never run short (every cluster before them).
    `sharing` is how jobs that share one of its GPUs run (controller.model.sharing)."""

    name: str
    rack: int
    gpu_type: GpuType
    gpus: tuple[Gpu, ...]
    links: tuple[tuple[PairLink | None, ...], ...]
    nic_gbps: float
    cpu_milli: int | None = None
    host_mem_mib: int | None = None
    sharing: SharingMode = DEFAULT_SHARING

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "host_mem_mib"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"node {self.name}: {name} must be >= 0, got {value}")

    @property
    def host(self) -> HostRequest | None:
        """Allocatable CPU and memory; None when the node states neither (one stated
        alone leaves the other unlimited)."""
        if self.cpu_milli is None and self.host_mem_mib is None:
            return None
        return HostRequest(
            UNCONSTRAINED if self.cpu_milli is None else self.cpu_milli,
            UNCONSTRAINED if self.host_mem_mib is None else self.host_mem_mib,
        )

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def pair_gbps(self, i: int, j: int) -> float:
        """Bandwidth of a P2P transfer between GPUs i and j of this node."""
        link = self.links[i][j]
        if link is None:  # i == j
            return float("inf")
        if link.nvlinks:
            return link.nvlinks * self.gpu_type.nvlink_gbps
        return self.gpu_type.pcie_gbps * PCIE_LEVEL_EFFICIENCY[link.pcie]


@dataclass(frozen=True, slots=True)
class Rack:
    """A top-of-rack switch; `uplink_gbps` is its capacity towards the spine (the
    aggregation layer of a three-tier Clos, summed over its equal-cost uplinks);
    `group` its aggregation group in `Cluster.groups` (unused when there are none);
    `uplinks` how many equal-cost links that capacity is split into, each flow on
    one of them (ECMP: controller.network.ecmp); 1 models ideal spreading."""

    name: str
    uplink_gbps: float
    group: int = 0
    uplinks: int = 1


@dataclass(frozen=True, slots=True)
class Group:
    """An aggregation group of a three-tier Clos (racks under common aggregation
    switches); `uplink_gbps` is its capacity towards the core, over `uplinks`
    equal-cost links (as `Rack.uplinks`)."""

    name: str
    uplink_gbps: float
    uplinks: int = 1


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    racks: tuple[Rack, ...]
    # Aggregation groups (three-tier Clos); none: racks meet at one spine.
    groups: tuple[Group, ...] = ()
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({n.name: i for i, n in enumerate(self.nodes)})
        if len(self._index) != len(self.nodes):
            raise ValueError("node names must be unique")
        for node in self.nodes:
            if not 0 <= node.rack < len(self.racks):
                raise ValueError(f"node {node.name}: rack index {node.rack} out of range")
        for rack in self.racks if self.groups else ():
            if not 0 <= rack.group < len(self.groups):
                raise ValueError(f"rack {rack.name}: group index {rack.group} out of range")
        tiers: list[Rack | Group] = [*self.racks, *self.groups]
        for tier in tiers:
            if tier.uplinks < 1:
                raise ValueError(f"{tier.name}: uplinks must be >= 1, got {tier.uplinks}")

    def node_index(self, name: str) -> int:
        return self._index[name]

    @cached_property
    def has_lanes(self) -> bool:
        """Whether some rack or group uplink is several ECMP lanes, so that a flow's
        path matters (controller.network.ecmp)."""
        return any(r.uplinks > 1 for r in self.racks) or any(g.uplinks > 1 for g in self.groups)

    @cached_property
    def num_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    @cached_property
    def gpus_per_node(self) -> tuple[int, ...]:
        return tuple(n.num_gpus for n in self.nodes)

    @cached_property
    def max_gpus_per_node(self) -> int:
        return max(self.gpus_per_node, default=0)


def parse_topology_matrix(text: str) -> tuple[tuple[PairLink | None, ...], ...]:
    """Parse an `nvidia-smi topo -m` style GPU matrix: one row per GPU, `X` on the
    diagonal, `NV<k>` or a PCIe level name elsewhere. A leading header row and
    leading `GPU<i>` labels are accepted and ignored."""
    rows: list[list[str]] = []
    for raw in text.strip().splitlines():
        cells = raw.split()
        if not cells or all(c.startswith("GPU") for c in cells):
            continue
        if cells[0].startswith("GPU"):
            cells = cells[1:]
        rows.append(cells)
    n = len(rows)
    matrix: list[tuple[PairLink | None, ...]] = []
    for i, cells in enumerate(rows):
        if len(cells) != n:
            raise ValueError(f"topology row {i} has {len(cells)} entries, expected {n}")
        row: list[PairLink | None] = []
        for j, cell in enumerate(cells):
            if i == j:
                if cell != "X":
                    raise ValueError(f"topology [{i}][{j}] must be X, got {cell!r}")
                row.append(None)
            else:
                row.append(_parse_cell(cell, i, j))
        matrix.append(tuple(row))
    for i in range(n):
        for j in range(n):
            if matrix[i][j] != matrix[j][i]:
                raise ValueError(f"topology is not symmetric at [{i}][{j}]")
    return tuple(matrix)


def _parse_cell(cell: str, i: int, j: int) -> PairLink:
    if cell.startswith("NV"):
        try:
            lanes = int(cell[2:])
        except ValueError:
            raise ValueError(f"topology [{i}][{j}]: bad NVLink count {cell!r}") from None
        if lanes <= 0:
            raise ValueError(f"topology [{i}][{j}]: NVLink count must be positive")
        # NVLink pairs keep their PCIe path too; it is not used for bandwidth.
        return PairLink(lanes, PcieLevel.SYS)
    try:
        return PairLink(0, PcieLevel[cell])
    except KeyError:
        known = ", ".join(["NV<k>", *PcieLevel.__members__])
        raise ValueError(f"topology [{i}][{j}]: unknown link {cell!r} (known: {known})") from None
