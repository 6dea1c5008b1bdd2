"""The job-level network model: multi-node DL jobs' iterations as coflows.

The job simulator calls `job_rates` whenever the set of running multi-node jobs
changes. Each such job's iteration is one coflow: a hierarchical ring all-reduce
whose inter-node ring visits the job's nodes sorted by (rack, node), so that it
leaves and enters each rack once. Node i sends one flow to the next node of the ring
(over `nic_up(i)`, `nic_down(next)`, and `rack_up`/`rack_down` when the hop crosses
racks) and receives one from the previous node; each flow carries

    2(N-1)/N x grad    per iteration (N nodes, grad the model's gradient)

which is what the reduce-scatter plus all-gather of a ring moves over each hop.
Capacities are the nodes' NICs (`Node.nic_gbps`) and the racks' uplinks
(`Rack.uplink_gbps`), the same in both directions. `allocate(policy, ...)` gives each
flow a rate with every coflow in flight; a job's contended rate b is the slowest of
its flows (a ring moves at its slowest hop).

Jobs are not in flight all the time: between all-reduces they compute and leave
their links to the others. With d the job's rate alone (its slowest link) and
phi_k = min(1, (V_k / d_k) / T_k(d_k)) the share of job k's iteration spent on the
wire when alone (V_k its bytes per flow, T_k its iteration time), the effective rate is

    b_eff = b + (d - b) x prod_{k sharing a link with the job} (1 - phi_k)

the contended rate while the others transfer, the rate alone while none of them does
(independent phases). It stays positive under priority policies that give a job 0
with every coflow in flight (SEBF behind a larger job on one NIC), and equals d for
a job that shares no link. See docs/network.md, "Jobs in replay".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller.model import Cluster
from controller.network.allocators import allocate
from controller.network.ecmp import NO_PATH, EcmpPath, hashed_path, hop_links, lane_capacity
from controller.network.model import Coflow, Flow, LinkId, nic_down, nic_up

# MB (10^6 bytes) per MiB.
_MB_PER_MIB = 2**20 / 1e6
# A job's effective rate never drops below this share of its rate alone.
_FLOOR = 1e-3


@dataclass(frozen=True, slots=True)
class NetJob:
    """A running job whose allocation spans `nodes` (cluster node indices, >= 2).

    `grad_mib` is all-reduced per iteration; `done_iters` iterations are done (Aalo's
    attained bytes); `remaining_s` is its remaining work at nominal speed (Sincronia's
    job-aware weight); `arrival_s` orders FIFO ties. The phase-level model
    (`controller.network.phases.jobs`) also reads `gpus` (Crux's GPU intensity) and
    `started_s`, when the job's current run began iterating (its phase).
    """

    job_id: str
    nodes: tuple[int, ...]
    grad_mib: float
    arrival_s: float = 0.0
    done_iters: float = 0.0
    remaining_s: float | None = None
    gpus: int = 0
    started_s: float = 0.0

    @property
    def flow_mb(self) -> float:
        """MB each flow of the ring carries per iteration."""
        n = len(self.nodes)
        return 2.0 * (n - 1) / n * self.grad_mib * _MB_PER_MIB


def ring_hops(cluster: Cluster, job: NetJob) -> list[tuple[int, int]]:
    """The (source, destination) nodes of each hop of the job's inter-node ring, in
    ring order: by group (three-tier Clos), rack and node, so that the ring leaves
    and enters each rack and group once."""
    grouped = bool(cluster.groups)

    def group(i: int) -> int:
        return cluster.racks[cluster.nodes[i].rack].group if grouped else 0

    ring = sorted(set(job.nodes), key=lambda i: (group(i), cluster.nodes[i].rack, i))
    return [(src, ring[(k + 1) % len(ring)]) for k, src in enumerate(ring)]


def ring_flows(
    cluster: Cluster, job: NetJob, paths: Sequence[EcmpPath] | None = None
) -> list[Flow]:
    """The job's iteration coflow: one flow per hop of its inter-node ring.

    A hop between racks also crosses the racks' links, and between groups the groups'
    core links; where a tier has several lanes, hop k takes `paths[k]` (Crux's
    choice, controller.network.phases.crux_paths) or, without `paths`, the one ECMP hashing
    gives it (controller.network.ecmp)."""
    size = job.flow_mb
    flows = []
    hashed = paths is None and cluster.has_lanes
    for k, (src, dst) in enumerate(ring_hops(cluster, job)):
        if paths is not None:
            path = paths[k]
        else:
            path = hashed_path(job.job_id, src, dst) if hashed else NO_PATH
        links = (nic_up(src), nic_down(dst), *hop_links(cluster, src, dst, path))
        flows.append(Flow(f"{job.job_id}/{k}", job.job_id, links, size))
    return flows


def link_capacity(cluster: Cluster, link: LinkId) -> float:
    kind, where = link
    if kind in ("nic-up", "nic-down"):
        return cluster.nodes[int(where)].nic_gbps
    return lane_capacity(cluster, kind, where)


def job_rates(
    policy: str,
    cluster: Cluster,
    jobs: Sequence[NetJob],
    iteration_s: Callable[[str, float], float],
) -> dict[str, float]:
    """Effective inter-node Gbit/s per job under `policy` (see the module docstring).

    `iteration_s(job_id, gbps)` is the job's iteration time with that inter-node rate
    (the simulator's rate model). Jobs on one node need no network and are not given.
    """
    if not jobs:
        return {}
    flows_of: dict[str, list[Flow]] = {}
    capacities: dict[LinkId, float] = {}
    users: dict[LinkId, list[str]] = {}
    all_flows: list[Flow] = []
    coflows: list[Coflow] = []
    for job in jobs:
        flows = ring_flows(cluster, job)
        flows_of[job.job_id] = flows
        all_flows.extend(flows)
        for f in flows:
            for link in f.links:
                if link not in capacities:
                    capacities[link] = link_capacity(cluster, link)
                users.setdefault(link, []).append(job.job_id)
        coflows.append(
            Coflow(
                job.job_id,
                arrival_s=job.arrival_s,
                attained_mb=job.done_iters * job.flow_mb * len(flows),
                job_remaining_s=job.remaining_s,
            )
        )
    rates = allocate(policy, capacities, all_flows, coflows)
    alone: dict[str, float] = {}
    duty: dict[str, float] = {}
    for job in jobs:
        d = min(capacities[link] for f in flows_of[job.job_id] for link in f.links)
        alone[job.job_id] = d
        wire_s = job.flow_mb / 125.0 / d
        duty[job.job_id] = min(1.0, wire_s / iteration_s(job.job_id, d))
    out: dict[str, float] = {}
    for job in jobs:
        jid = job.job_id
        contended = min(rates[f.flow_id] for f in flows_of[jid])
        others = {k for f in flows_of[jid] for link in f.links for k in users[link] if k != jid}
        idle = math.prod(1.0 - duty[k] for k in sorted(others))
        d = alone[jid]
        out[jid] = max(_FLOOR * d, min(d, contended + (d - contended) * idle))
    return out
