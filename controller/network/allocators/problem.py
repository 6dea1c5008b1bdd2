"""The array form every allocator works on: flows x links as a sparse incidence.

`FlowArrays` is what the per-family allocators take. The coflow replay builds one
directly from its numpy state at each event (706,000 flows would not survive a
round trip through dataclasses); `from_records` builds one from `Flow`/`Coflow`
records for callers such as the job simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from controller.network.model import Coflow, CoflowId, Flow, LinkId

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class FlowArrays:
    """Flows sorted by coflow; coflows indexed 0..C-1 in FIFO order (arrival, id).

    `entry_flow[e]` crosses `entry_link[e]`: one entry per (flow, link). `path[f]`
    names the flow's set of links, so flows with equal paths can be allocated as
    one group by the max-min passes (they always get equal shares there).
    """

    capacity_gbps: FloatArray  # (L,)
    entry_flow: IntArray  # (E,)
    entry_link: IntArray  # (E,)
    remaining_mb: FloatArray  # (F,)
    coflow: IntArray  # (F,), non-decreasing
    path: IntArray  # (F,)
    attained_mb: FloatArray  # (C,)
    weight: FloatArray  # (C,), Sincronia's coflow weight (job-aware when known)
    n_paths: int  # every path id is below this

    @property
    def n_flows(self) -> int:
        return int(self.remaining_mb.shape[0])

    @property
    def n_links(self) -> int:
        return int(self.capacity_gbps.shape[0])

    @property
    def n_coflows(self) -> int:
        return int(self.attained_mb.shape[0])

    def coflow_link_mb(self) -> FloatArray:
        """(C, L): MB each coflow still has to move across each link."""
        key = self.coflow[self.entry_flow] * self.n_links + self.entry_link
        flat = np.bincount(
            key,
            weights=self.remaining_mb[self.entry_flow],
            minlength=self.n_coflows * self.n_links,
        )
        out: FloatArray = flat.astype(np.float64).reshape(self.n_coflows, self.n_links)
        return out

    def coflow_bounds(self) -> IntArray:
        """(C+1,): flows of coflow c are `bounds[c]:bounds[c+1]`."""
        return np.searchsorted(self.coflow, np.arange(self.n_coflows + 1)).astype(np.int64)


def from_records(
    capacities: Mapping[LinkId, float],
    flows: Sequence[Flow],
    coflows: Sequence[Coflow],
) -> tuple[FlowArrays, list[int]]:
    """Arrays for `flows`, and for each array position the index into `flows`."""
    link_index = {link: i for i, link in enumerate(capacities)}
    cap = np.array([float(c) for c in capacities.values()], dtype=np.float64)
    if (cap < 0).any() or not np.isfinite(cap).all():
        raise ValueError("link capacities must be finite and non-negative")
    by_id: dict[CoflowId, Coflow] = {}
    for coflow in coflows:
        if coflow.coflow_id in by_id:
            raise ValueError(f"coflow {coflow.coflow_id!r} listed twice")
        by_id[coflow.coflow_id] = coflow
    order = sorted(by_id.values(), key=lambda c: (c.arrival_s, str(c.coflow_id)))
    coflow_index = {c.coflow_id: i for i, c in enumerate(order)}

    seen: set[object] = set()
    for flow in flows:
        if flow.flow_id in seen:
            raise ValueError(f"flow {flow.flow_id!r} listed twice")
        seen.add(flow.flow_id)
        if flow.coflow_id not in coflow_index:
            raise ValueError(f"flow {flow.flow_id!r}: unknown coflow {flow.coflow_id!r}")
        if not flow.links:
            raise ValueError(f"flow {flow.flow_id!r} crosses no link")
        for link in flow.links:
            if link not in link_index:
                raise ValueError(f"flow {flow.flow_id!r}: link {link!r} has no capacity")
        if not flow.remaining_mb >= 0:
            raise ValueError(f"flow {flow.flow_id!r}: remaining_mb must be >= 0")

    positions = sorted(range(len(flows)), key=lambda i: coflow_index[flows[i].coflow_id])
    paths: dict[frozenset[LinkId], int] = {}
    entry_flow: list[int] = []
    entry_link: list[int] = []
    path: list[int] = []
    for pos, i in enumerate(positions):
        links = frozenset(flows[i].links)
        path.append(paths.setdefault(links, len(paths)))
        for link in links:
            entry_flow.append(pos)
            entry_link.append(link_index[link])
    arrays = FlowArrays(
        capacity_gbps=cap,
        entry_flow=np.array(entry_flow, dtype=np.int64),
        entry_link=np.array(entry_link, dtype=np.int64),
        remaining_mb=np.array([flows[i].remaining_mb for i in positions], dtype=np.float64),
        coflow=np.array([coflow_index[flows[i].coflow_id] for i in positions], dtype=np.int64),
        path=np.array(path, dtype=np.int64),
        attained_mb=np.array([c.attained_mb for c in order], dtype=np.float64),
        weight=np.array([_weight(c) for c in order], dtype=np.float64),
        n_paths=len(paths),
    )
    return arrays, positions


def _weight(coflow: Coflow) -> float:
    if coflow.job_remaining_s is None:
        return coflow.weight
    return coflow.weight / max(coflow.job_remaining_s, 1e-9)
