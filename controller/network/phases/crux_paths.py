"""Crux's path selection: the most GPU-intense jobs choose their ECMP lanes first.

Crux (Cao et al., SIGCOMM 2024, §4.1) routes jobs in decreasing GPU intensity (Eq. 2,
`controller.network.phases.crux`), each over the least congested of its equal-cost paths
given the jobs routed before it, so that the most intense jobs get lanes of their
own and what collisions remain fall on the least intense. Here a lane's congestion
is the wire time per iteration that the jobs routed before put on it (their burst's
MB over the lane's Gbit/s, summed). Each hop of a job's ring takes, among its paths
(`ecmp.path_choices`), the one whose most congested lane is least congested (ties:
the smaller sum over its lanes, then the first path), and adds its burst to those
lanes before the next hop chooses.

Deviations: Crux's daemon estimates each path's load from the traffic it sees; the
model knows the bursts exactly. Congestion is wire time, not Crux's
intensity-weighted contention, so a lane is judged by how busy it already is, whoever
keeps it busy. Only the rack and group tiers have lanes (NICs are single links).

Called by controller.network.phases.jobs under `--network crux`, when the cluster
has a tier of several lanes (`Cluster.has_lanes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.model import Cluster
from controller.network.ecmp import EcmpPath, hop_links, lane_capacity, path_choices
from controller.network.jobs import NetJob, ring_hops
from controller.network.model import MB_PER_S_PER_GBPS, LinkId


def select_paths(
    cluster: Cluster,
    jobs: Sequence[NetJob],
    order: Sequence[str],
    burst_mb: Mapping[str, float],
) -> dict[str, list[EcmpPath]]:
    """Each job's path per hop of its ring (`jobs.ring_hops` order), routing the jobs
    in `order` (most intense first; every job of `jobs` named once)."""
    by_id = {job.job_id: job for job in jobs}
    wire_s: dict[LinkId, float] = {}
    out: dict[str, list[EcmpPath]] = {}
    for job_id in order:
        chosen: list[EcmpPath] = []
        for src, dst in ring_hops(cluster, by_id[job_id]):
            paths = path_choices(cluster, src, dst)
            options = [(p, hop_links(cluster, src, dst, p)) for p in paths]
            path, links = min(options, key=lambda option: _congestion(option[1], wire_s))
            for link in links:
                gbps = lane_capacity(cluster, *link)
                wire_s[link] = wire_s.get(link, 0.0) + burst_mb[job_id] / MB_PER_S_PER_GBPS / gbps
            chosen.append(path)
        out[job_id] = chosen
    return out


def _congestion(links: Sequence[LinkId], wire_s: Mapping[LinkId, float]) -> tuple[float, float]:
    loads = [wire_s.get(link, 0.0) for link in links]
    return max(loads, default=0.0), sum(loads)
