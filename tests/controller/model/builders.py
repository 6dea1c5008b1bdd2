"""Builders for small clusters made directly from the model's dataclasses."""

from __future__ import annotations

from controller.model.cluster import Cluster, Gpu, GpuType, Node, Rack, parse_topology_matrix
from controller.model.sharing import DEFAULT_SHARING, SharingMode

# V100 SXM2: one NVLink 2.0 lane is 25 GB/s = 200 Gbit/s per direction; PCIe 3.0 x16.
V100 = GpuType("V100-SXM2-16GB", mem_mib=16_160, nvlink_gbps=200.0, pcie_gbps=126.0)

DGX1_TOPOLOGY = """
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X
"""

PCIE4_TOPOLOGY = """
X   PIX PHB PHB
PIX X   PHB PHB
PHB PHB X   PIX
PHB PHB PIX X
"""


def make_node(
    name: str,
    *,
    topology: str = DGX1_TOPOLOGY,
    gpu_type: GpuType = V100,
    rack: int = 0,
    nic_gbps: float = 100.0,
    sharing: SharingMode = DEFAULT_SHARING,
) -> Node:
    links = parse_topology_matrix(topology)
    gpus = tuple(
        Gpu(i, f"GPU-{name}-{i}", numa=0 if i < len(links) // 2 else 1) for i in range(len(links))
    )
    return Node(name, rack, gpu_type, gpus, links, nic_gbps, sharing=sharing)


def make_cluster(
    nodes: int = 2,
    *,
    racks: int = 1,
    uplink_gbps: float = 400.0,
    nic_gbps: float = 100.0,
    topology: str = DGX1_TOPOLOGY,
    sharing: SharingMode = DEFAULT_SHARING,
) -> Cluster:
    """`nodes` nodes spread round-robin over `racks` racks."""
    return Cluster(
        "test",
        tuple(
            make_node(
                f"n{i}", rack=i % racks, nic_gbps=nic_gbps, topology=topology, sharing=sharing
            )
            for i in range(nodes)
        ),
        tuple(Rack(f"r{r}", uplink_gbps) for r in range(racks)),
    )
