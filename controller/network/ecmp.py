"""ECMP in a Clos: a tier's equal-cost links as lanes, and the path each flow takes.

A rack (ToR) with `Rack.uplinks` = K > 1 reaches its aggregation switches over K
equal-cost links of `uplink_gbps / K` each, and a group with `Group.uplinks` = K
reaches the core likewise. K = 1, the default, keeps a tier as one link of the
summed capacity: ideal spreading, the model of clusters that do not state lanes.

A flow between two racks goes up to one aggregation switch a and down from it, so it
takes lane a mod K of its source ToR's uplink and of its destination ToR's downlink;
a flow between two groups goes through one core switch c, lane c mod K of both
groups' core links. A path is the pair (a, c). ECMP picks it by hashing the flow
(`hashed_path`: CRC-32 of the job and the hop's two nodes, salted per tier as
switches salt their hashes; stable across runs and machines): flows are spread
evenly on average but two may land on one lane while its neighbour stays idle —
the collisions that Crux's path selection removes (Cao et al., SIGCOMM 2024, §2.2
and §4.1; controller.network.phases.crux_paths).

Lanes are named by the tier's link kind and "index:lane" (`lane_where`), e.g.
("rack-up", "3:1"); a tier of one lane keeps its plain index, so clusters without
lanes name their links as before.

Called by controller.network.jobs (`ring_flows`, `link_capacity`), controller.network
.crux_paths and controller.network.loads.
"""

from __future__ import annotations

import itertools
import zlib

from controller.model import Cluster
from controller.network.model import LinkId, group_down, group_up, rack_down, rack_up

# (aggregation switch, core switch) of a flow; each taken modulo the tier's lanes.
EcmpPath = tuple[int, int]
# The path of every flow in a cluster without lanes (`Cluster.has_lanes` false),
# where there is nothing to hash.
NO_PATH: EcmpPath = (0, 0)


def hashed_path(job_id: str, src: int, dst: int) -> EcmpPath:
    """The path ECMP hashing gives the flow of `job_id` from node `src` to `dst`."""
    key = f"{job_id}/{src}/{dst}".encode()
    return zlib.crc32(b"agg/" + key), zlib.crc32(b"core/" + key)


def lane_where(index: int, lane: int, lanes: int) -> int | str:
    """How a link of a tier with `lanes` lanes is named: its index alone for one lane."""
    return index if lanes == 1 else f"{index}:{lane % lanes}"


def site(where: str | int) -> tuple[int, int | None]:
    """(rack, group or node index, lane or None) of a link's `where`."""
    if isinstance(where, int):
        return where, None
    index, colon, lane = where.partition(":")
    return int(index), int(lane) if colon else None


def lane_capacity(cluster: Cluster, kind: str, where: str | int) -> float:
    """Gbit/s of one rack or group link (a lane: the tier's capacity over its lanes)."""
    index, lane = site(where)
    tier = cluster.groups[index] if kind.startswith("group") else cluster.racks[index]
    return tier.uplink_gbps / (tier.uplinks if lane is not None else 1)


def hop_links(cluster: Cluster, src: int, dst: int, path: EcmpPath) -> tuple[LinkId, ...]:
    """The rack and group links a flow from node `src` to `dst` crosses on `path`
    (none within a rack; the NICs are the caller's)."""
    a, b = cluster.nodes[src].rack, cluster.nodes[dst].rack
    if a == b:
        return ()
    ra, rb = cluster.racks[a], cluster.racks[b]
    links: tuple[LinkId, ...] = (
        rack_up(lane_where(a, path[0], ra.uplinks)),
        rack_down(lane_where(b, path[0], rb.uplinks)),
    )
    if cluster.groups and ra.group != rb.group:
        ga, gb = cluster.groups[ra.group], cluster.groups[rb.group]
        links += (
            group_up(lane_where(ra.group, path[1], ga.uplinks)),
            group_down(lane_where(rb.group, path[1], gb.uplinks)),
        )
    return links


def path_choices(cluster: Cluster, src: int, dst: int) -> list[EcmpPath]:
    """The paths a flow from `src` to `dst` may take that differ in some lane, in
    order; one when it crosses no tier of several lanes."""
    a, b = cluster.nodes[src].rack, cluster.nodes[dst].rack
    if a == b:
        return [(0, 0)]
    ra, rb = cluster.racks[a], cluster.racks[b]
    aggs = max(ra.uplinks, rb.uplinks)
    cores = 1
    if cluster.groups and ra.group != rb.group:
        cores = max(cluster.groups[ra.group].uplinks, cluster.groups[rb.group].uplinks)
    return list(itertools.product(range(aggs), range(cores)))
