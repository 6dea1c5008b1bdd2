"""The load the network allocator puts on each NIC and rack uplink, for display.

Called by controller.live (local mode, when its simulator runs a network allocator)
and by the API's cluster view in cluster mode (from the DLJobs' `bandwidthGbps`),
both through `link_loads`. Each running multi-node job sends one flow per hop of its
inter-node ring (`controller.network.jobs.ring_flows`), every flow at the job's
assigned inter-node rate; a link's load is the sum of the rates of the flows that
cross it. With the simulator's effective rates (the contended rate raised by the
neighbours' compute phases, docs/network.md) a busy link can show more than its
capacity: the jobs on it take turns on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.model import Cluster
from controller.network.ecmp import site
from controller.network.jobs import NetJob, link_capacity, ring_flows
from controller.network.model import LinkId

# Link kinds in display order (controller.network.model's names).
LINK_KINDS = ("nic-up", "nic-down", "rack-up", "rack-down", "group-up", "group-down")


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """One direction of one NIC, rack uplink or group uplink: what crosses it and what
    it holds. `where` is the node's name for a NIC, else the rack's or group's name,
    and "/lane" for one of a tier's ECMP lanes (controller.network.ecmp)."""

    kind: str
    where: str
    load_gbps: float
    capacity_gbps: float
    jobs: int


@dataclass(frozen=True, slots=True)
class JobTraffic:
    """A running job's nodes (cluster indices) and its assigned inter-node Gbit/s."""

    job_id: str
    nodes: tuple[int, ...]
    gbps: float


def link_loads(cluster: Cluster, traffic: Iterable[JobTraffic]) -> list[LinkLoad]:
    """The load on every link some multi-node job crosses, by kind then node or rack
    order. Jobs on one node cross no link and add nothing."""
    load: dict[LinkId, float] = {}
    users: dict[LinkId, set[str]] = {}
    for job in traffic:
        if len(set(job.nodes)) < 2:
            continue
        for flow in ring_flows(cluster, NetJob(job.job_id, job.nodes, grad_mib=0.0)):
            for link in flow.links:
                load[link] = load.get(link, 0.0) + job.gbps
                users.setdefault(link, set()).add(job.job_id)

    def order(link: LinkId) -> tuple[int, int, int]:
        index, lane = site(link[1])
        return LINK_KINDS.index(link[0]), index, -1 if lane is None else lane

    out = []
    for link in sorted(load, key=order):
        kind, where = link
        index, lane = site(where)
        if kind.startswith("nic"):
            named = cluster.nodes[index].name
        elif kind.startswith("group"):
            named = cluster.groups[index].name
        else:
            named = cluster.racks[index].name
        if lane is not None:
            named = f"{named}/{lane}"
        out.append(
            LinkLoad(
                kind=kind,
                where=named,
                load_gbps=load[link],
                capacity_gbps=link_capacity(cluster, link),
                jobs=len(users[link]),
            )
        )
    return out
