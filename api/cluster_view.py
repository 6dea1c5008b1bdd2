"""The per-GPU, topology and network parts of the cluster view, for both backends.

`api.backends.LocalBackend.describe` and `api.cluster_mode.describe.describe_kube` (cluster
mode) hand what they know of each GPU (the jobs' shares on it, its utilisation) to
`gpu_list`; both serve `GET /api/v1/cluster/topology` with `topology_of` over their
`Cluster`, and local mode turns the simulator's link loads into `link_loads_public`.
Job ids here are every tenant's: api.jobs.redaction hides the others' before a user sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from api.schemas.cluster import (
    GpuPublic,
    LinkKind,
    LinkLoadPublic,
    NodeTypePublic,
    RackPublic,
    TopologyPublic,
)
from controller.model import Cluster, Node
from controller.network.loads import LinkLoad

# Shares and utilisation go over the wire rounded: a thousandth of a GPU is finer than
# any MPS thread percentage (whole percent) and keeps the JSON short at 8,000 GPUs.
DIGITS = 3


def gpu_list(
    num_gpus: int,
    shares: Mapping[int, Sequence[tuple[str, float]]],
    util: Mapping[int, float] | None,
    omitted: float | None = 0.0,
) -> list[GpuPublic]:
    """One node's GPUs: the (job id, fraction) shares on each GPU index, by job id, and
    each GPU's utilisation where `util` says (`omitted` for a GPU it leaves out: idle
    in local mode, not known in cluster mode); `util` None: null on every GPU."""
    return [GpuPublic.model_validate(g) for g in gpu_rows(num_gpus, shares, util, omitted)]


def gpu_rows(
    num_gpus: int,
    shares: Mapping[int, Sequence[tuple[str, float]]],
    util: Mapping[int, float] | None,
    omitted: float | None = 0.0,
) -> list[dict[str, Any]]:
    """`gpu_list` as plain dicts, for a caller that validates many nodes' at once
    (api.backends.LocalBackend: one pydantic call for 8,000 GPUs costs a fraction of
    8,000 models built one by one)."""
    out = []
    for index in range(num_gpus):
        on = sorted(shares.get(index, ()))
        busy = None if util is None else util.get(index, omitted)
        out.append(
            {
                "index": index,
                "shares": [{"job": j, "fraction": round(f, DIGITS)} for j, f in on],
                "util": None if busy is None else round(busy, DIGITS),
            }
        )
    return out


def topology_of(cluster: Cluster) -> TopologyPublic:
    """The cluster's node types (nodes alike in GPU model, NUMA layout, pair links and
    NIC share one entry) and its racks with their nodes."""
    types: dict[tuple[object, ...], NodeTypePublic] = {}
    for node in cluster.nodes:
        key = (node.gpu_type, tuple(g.numa for g in node.gpus), node.links, node.nic_gbps)
        kind = types.get(key)
        if kind is None:
            kind = types[key] = _node_type(f"type-{len(types)}", node)
        kind.nodes.append(node.name)
    racks = [RackPublic(name=r.name, uplink_gbps=r.uplink_gbps, nodes=[]) for r in cluster.racks]
    for node in cluster.nodes:
        racks[node.rack].nodes.append(node.name)
    return TopologyPublic(node_types=list(types.values()), racks=racks)


def _node_type(type_id: str, node: Node) -> NodeTypePublic:
    n = node.num_gpus
    return NodeTypePublic(
        id=type_id,
        gpu_type=node.gpu_type.name,
        gpus=n,
        nic_gbps=node.nic_gbps,
        numa=[g.numa for g in node.gpus],
        links=[["X" if link is None else link.label() for link in row] for row in node.links],
        gbps=[
            [None if i == j else round(node.pair_gbps(i, j), 1) for j in range(n)] for i in range(n)
        ],
        nodes=[],
    )


def link_loads_public(loads: Iterable[LinkLoad] | None) -> list[LinkLoadPublic] | None:
    if loads is None:
        return None
    return [
        LinkLoadPublic(
            kind=cast(LinkKind, x.kind),
            where=x.where,
            load_gbps=round(x.load_gbps, DIGITS),
            capacity_gbps=x.capacity_gbps,
            jobs=x.jobs,
        )
        for x in loads
    ]
