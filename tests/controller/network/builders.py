"""Builders for network tests: `make_flow("f1", "c1", "a>b", 100)`."""

from __future__ import annotations

from controller.network import Coflow, Flow, LinkId, nic_down, nic_up


def path(spec: str) -> tuple[LinkId, ...]:
    """'a>b' is node a's NIC up then node b's NIC down."""
    src, dst = spec.split(">")
    return (nic_up(src), nic_down(dst))


def make_flow(flow_id: str, coflow_id: str, spec: str, remaining_mb: float) -> Flow:
    return Flow(flow_id, coflow_id, path(spec), remaining_mb)


def nics(*nodes: str, gbps: float = 10.0) -> dict[LinkId, float]:
    caps: dict[LinkId, float] = {}
    for node in nodes:
        caps[nic_up(node)] = gbps
        caps[nic_down(node)] = gbps
    return caps


def make_coflow(coflow_id: str, arrival_s: float = 0.0, attained_mb: float = 0.0) -> Coflow:
    return Coflow(coflow_id, arrival_s=arrival_s, attained_mb=attained_mb)
