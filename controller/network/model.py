"""The records the allocators read: links, flows and coflows (frozen, stdlib only).

Built by whoever asks for rates: the coflow replay (`experiments.coflow.replay`)
or the job simulator, which turns each multi-node DL job's iteration into a coflow
over the NICs and rack uplinks it crosses.
"""

from __future__ import annotations

from dataclasses import dataclass

# A link is named by its kind and the node, rack or group it belongs to, e.g.
# ("nic-up", "node-3") or ("rack-down", 1). Each is one direction of one port.
LinkId = tuple[str, str | int]
FlowId = str | int
CoflowId = str | int

# Gbit/s -> MB/s with MB = 10^6 bytes: 10^9 / 8 / 10^6.
MB_PER_S_PER_GBPS = 125.0


def nic_up(node: str | int) -> LinkId:
    """A node's NIC, sending direction."""
    return ("nic-up", node)


def nic_down(node: str | int) -> LinkId:
    """A node's NIC, receiving direction."""
    return ("nic-down", node)


def rack_up(rack: str | int) -> LinkId:
    """A top-of-rack switch's uplink towards the spine."""
    return ("rack-up", rack)


def rack_down(rack: str | int) -> LinkId:
    """A top-of-rack switch's downlink from the spine."""
    return ("rack-down", rack)


def group_up(group: str | int) -> LinkId:
    """An aggregation group's uplink towards the core (three-tier Clos)."""
    return ("group-up", group)


def group_down(group: str | int) -> LinkId:
    """An aggregation group's downlink from the core."""
    return ("group-down", group)


@dataclass(frozen=True, slots=True)
class Flow:
    """One transfer: the links it crosses (in any order) and the MB it has left."""

    flow_id: FlowId
    coflow_id: CoflowId
    links: tuple[LinkId, ...]
    remaining_mb: float


@dataclass(frozen=True, slots=True)
class Coflow:
    """What a policy may know about a coflow besides its flows.

    `arrival_s` orders FIFO ties (then `coflow_id`); `attained_mb` is what it has
    sent so far (Aalo); `weight` and `job_remaining_s` make Sincronia job-aware:
    the coflow's weight is `weight / job_remaining_s` when the latter is known.
    """

    coflow_id: CoflowId
    arrival_s: float = 0.0
    attained_mb: float = 0.0
    weight: float = 1.0
    job_remaining_s: float | None = None
