"""What a built cluster holds, for people: `describe` (a few lines) and
`cluster_summary` (the same as JSON-ready data), both printed by `gpuflow cluster`.

Nodes are grouped by kind (GPU model, GPUs, pair links, NIC, sharing mode) as the
scheduler sees them, racks by size and uplink; `cluster_summary` lists every rack
and group by name, and says for each GPU model whether the GPU catalogue
(controller.model.gpus) has it and the NVML product names it answers to.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controller.model.cluster import Cluster, GpuType, Node
from controller.model.gpus import GPU_CATALOG
from controller.model.sharing import SharingMode

_Kind = tuple[GpuType, int, str, float, SharingMode]


def describe(cluster: Cluster) -> str:
    """A few lines: nodes by kind, racks by size and uplink, groups."""
    lines = [
        f"cluster {cluster.name}: {_count(len(cluster.nodes), 'node')}, "
        f"{_count(cluster.num_gpus, 'GPU')}, {_count(len(cluster.racks), 'rack')}"
    ]
    for (t, n, pairs, nic, sharing), count in _kinds(cluster).items():
        inside = f", GPU pairs {pairs}" if pairs else ""
        lines.append(
            f"  {_count(count, 'node')} x {n} {t.name} ({t.mem_mib // 1024} GiB, "
            f"speed {t.speed:g}x V100){inside}, NIC {nic:g} Gbit/s, sharing {sharing}"
        )
    members = _rack_members(cluster)
    racks: Counter[tuple[int, float, float, int]] = Counter()
    for i, rack in enumerate(cluster.racks):
        nodes = members.get(i, [])
        nic = sum(n.nic_gbps for n in nodes)
        racks[(len(nodes), rack.uplink_gbps, nic / rack.uplink_gbps, rack.uplinks)] += 1
    for (n, uplink, ratio, lanes), count in sorted(racks.items(), reverse=True):
        lines.append(
            f"  {_count(count, 'rack')} x {_count(n, 'node')}, uplink {uplink:g} Gbit/s"
            f"{_lanes(uplink, lanes)} (oversubscription {ratio:.3g}:1)"
        )
    for g, group in enumerate(cluster.groups):
        under = sum(r.uplink_gbps for r in cluster.racks if r.group == g)
        lines.append(
            f"  group {group.name}: {_count(sum(r.group == g for r in cluster.racks), 'rack')}, "
            f"core uplink {group.uplink_gbps:g} Gbit/s{_lanes(group.uplink_gbps, group.uplinks)}"
            f" (oversubscription {under / group.uplink_gbps:.3g}:1)"
        )
    return "\n".join(lines)


def cluster_summary(cluster: Cluster) -> dict[str, Any]:
    """The cluster as `gpuflow cluster --json` prints it: node types (a kind of node
    and how many), racks and groups. Bandwidths in Gbit/s, one direction; `speed`
    relative to a V100; `nvlink_gbps` one NVLink lane."""
    members = _rack_members(cluster)
    racks = []
    for i, rack in enumerate(cluster.racks):
        nic = sum(n.nic_gbps for n in members.get(i, []))
        racks.append(
            {
                "name": rack.name,
                "nodes": len(members.get(i, [])),
                "uplink_gbps": rack.uplink_gbps,
                "uplinks": rack.uplinks,
                "oversubscription": round(nic / rack.uplink_gbps, 6),
                "group": cluster.groups[rack.group].name if cluster.groups else None,
            }
        )
    groups = [
        {"name": g.name, "uplink_gbps": g.uplink_gbps, "uplinks": g.uplinks} for g in cluster.groups
    ]
    return {
        "name": cluster.name,
        "nodes": len(cluster.nodes),
        "gpus": cluster.num_gpus,
        "node_types": [
            {
                "count": count,
                "gpus_per_node": n,
                "gpu": _gpu(t),
                "gpu_pairs": pairs.split("/") if pairs else [],
                "nic_gbps": nic,
                "sharing": str(sharing),
            }
            for (t, n, pairs, nic, sharing), count in _kinds(cluster).items()
        ],
        "racks": racks,
        "groups": groups,
    }


def _gpu(t: GpuType) -> dict[str, Any]:
    spec = GPU_CATALOG.by_name.get(t.name)
    return {
        "model": t.name,
        "products": list(spec.products) if spec else [],
        "catalogued": spec is not None,
        "mem_mib": t.mem_mib,
        "speed": t.speed,
        "nvlink_gbps": t.nvlink_gbps,
        "pcie_gbps": t.pcie_gbps,
    }


def _kinds(cluster: Cluster) -> dict[_Kind, int]:
    """Nodes by kind, sorted by GPU model name, then GPUs, pairs, NIC and mode."""
    kinds: Counter[_Kind] = Counter()
    for node in cluster.nodes:
        kinds[(node.gpu_type, node.num_gpus, _pair_kinds(node), node.nic_gbps, node.sharing)] += 1
    return dict(sorted(kinds.items(), key=lambda kv: (kv[0][0].name, *kv[0][1:])))


def _rack_members(cluster: Cluster) -> dict[int, list[Node]]:
    members: dict[int, list[Node]] = {}
    for node in cluster.nodes:
        members.setdefault(node.rack, []).append(node)
    return members


def _lanes(gbps: float, lanes: int) -> str:
    return "" if lanes == 1 else f" in {lanes} ECMP lanes of {gbps / lanes:g}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pair_kinds(node: Node) -> str:
    """The node's kinds of GPU pair link, nearest first: `NV2/NV1/SYS`."""
    links = {link for row in node.links for link in row if link is not None}
    nearest = sorted(links, key=lambda link: (-link.nvlinks, link.pcie))
    return "/".join(dict.fromkeys(link.label() for link in nearest))
