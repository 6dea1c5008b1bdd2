"""The flows in flight during a coflow replay: three ways to keep them between events.

Called by the event loop of experiments/coflow/replay.py (`replay`,
`replay_reference`), which admits coflows into a state and asks it to `step` to the
next event:

- `PortState`: compact arrays with flow counts per (up, down) path, rates from the
  port-fabric form of a policy (`experiments.coflow.ports`);
- `PathState`: fair sharing reallocated at every flow completion, one clock per path;
- `ReferenceState`: `FlowArrays` rebuilt at every event for the generic allocators,
  the oracle the other two are tested against.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from controller.network.allocators import NetworkPolicy
from controller.network.allocators.problem import FloatArray, FlowArrays, IntArray
from controller.network.allocators.waterfill import SATURATED
from controller.network.model import MB_PER_S_PER_GBPS
from experiments.coflow.filling import advance_fair
from experiments.coflow.flows import SAME_TIME, Advance, TraceFlows, owner_runs
from experiments.coflow.ports import PortArrays


class PortState:
    """The flows in flight as compact arrays (coflow by coflow, FIFO), flow counts
    per path kept up to date, rates from a `ports` function."""

    def __init__(
        self, flows: TraceFlows, port_gbps: float, rates: Callable[[PortArrays], FloatArray]
    ) -> None:
        self.flows = flows
        self.rates = rates
        p = flows.ports
        self.path = flows.src * p + flows.dst
        self.capacity = np.full(2 * p, float(port_gbps))
        self.attained = np.zeros(flows.bounds.shape[0] - 1)
        self.left = np.diff(flows.bounds)
        self.count = np.zeros(p * p)
        self.index: IntArray = np.zeros(0, dtype=np.int64)  # global flow ids in flight
        self.owner: IntArray = np.zeros(0, dtype=np.int64)  # their global coflow
        self.src: IntArray = np.zeros(0, dtype=np.int64)
        self.dst: IntArray = np.zeros(0, dtype=np.int64)
        self.rem: FloatArray = np.zeros(0)
        self.size: FloatArray = np.zeros(0)
        self._runs: tuple[IntArray, IntArray] | None = None
        # The rates in force, kept between events that do not reallocate.
        self._mb_s: FloatArray | None = None

    @property
    def in_flight(self) -> int:
        return int(self.rem.size)

    def admit(self, g: int) -> None:
        f = self.flows
        lo, hi = int(f.bounds[g]), int(f.bounds[g + 1])
        self.index = np.concatenate([self.index, np.arange(lo, hi, dtype=np.int64)])
        self.owner = np.concatenate([self.owner, f.coflow[lo:hi]])
        self.src = np.concatenate([self.src, f.src[lo:hi]])
        self.dst = np.concatenate([self.dst, f.dst[lo:hi]])
        self.rem = np.concatenate([self.rem, f.size_mb[lo:hi]])
        self.size = np.concatenate([self.size, f.size_mb[lo:hi]])
        self.count += np.bincount(self.path[lo:hi], minlength=self.count.size)
        self._runs = None
        self._mb_s = None

    def step(
        self, policy: NetworkPolicy, horizon_s: float, per_flow: bool
    ) -> tuple[float, list[int]]:
        if self._runs is None:
            self._runs = owner_runs(self.owner)
        owners, local = self._runs
        attained = self.attained[owners]
        mb_s = self._mb_s
        if mb_s is None:
            p = self.flows.ports
            arrays = PortArrays(
                capacity_gbps=self.capacity,
                src=self.src,
                dst=self.dst,
                coflow=local,
                remaining_mb=self.rem,
                attained_mb=attained,
                weight=np.ones(owners.size),
                path_count=self.count.reshape(p, p),
            )
            mb_s = self.rates(arrays) * MB_PER_S_PER_GBPS
        step = Advance(policy, mb_s, self.rem, self.size, local, attained, horizon_s, per_flow)
        self.attained[owners] = step.attained
        self.rem = step.remaining
        finished: list[int] = []
        done = step.done
        self._mb_s = None if per_flow else mb_s
        if done.any():
            gone = self.owner[done]
            self.count -= np.bincount(self.path[self.index[done]], minlength=self.count.size)
            counts = np.bincount(gone, minlength=self.left.size)
            touched = np.flatnonzero(counts)
            self.left[touched] -= counts[touched]
            finished = [int(g) for g in touched if self.left[g] == 0]
            keep = ~done
            self.index = self.index[keep]
            self.owner = self.owner[keep]
            self.src = self.src[keep]
            self.dst = self.dst[keep]
            self.rem = self.rem[keep]
            self.size = self.size[keep]
            if finished:
                self._runs = None
                self._mb_s = None
            else:
                self._runs = (owners, local[keep])
                if self._mb_s is not None:
                    self._mb_s = self._mb_s[keep]
        return step.dt, finished


class PathState:
    """Fair sharing, reallocated at every flow completion, kept per path.

    Max-min fairness gives every flow of a path (up link, down link) the same rate,
    so a path needs one clock: the MB each of its flows has been served since the
    start. A flow admitted when its path's clock reads c finishes when the clock
    reads c + size; each path keeps a heap of those targets, and an event costs a
    filling plus a few passes over the P x P paths, however many flows are in
    flight (up to 155,000 on the FB trace). Completion rules as `Advance`.
    """

    def __init__(self, flows: TraceFlows, port_gbps: float) -> None:
        self.flows = flows
        p = flows.ports
        self.path = flows.src * p + flows.dst
        self.capacity = np.full(2 * p, float(port_gbps))
        self.count = np.zeros((p, p))
        self.count_flat = self.count.reshape(-1)  # a view
        self.clock = np.zeros(p * p)
        self.head = np.full(p * p, np.inf)  # the smallest finish target per path
        self.head_size = np.ones(p * p)  # that flow's size
        self.heaps: dict[int, list[tuple[float, int]]] = {}
        self.left: list[int] = np.diff(flows.bounds).tolist()
        self._in_flight = 0
        # Per-flow lookups in the completion loop, as lists (cheaper than numpy scalars).
        self.size_of: list[float] = flows.size_mb.tolist()
        self.coflow_of: list[int] = flows.coflow.tolist()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def admit(self, g: int) -> None:
        f = self.flows
        lo, hi = int(f.bounds[g]), int(f.bounds[g + 1])
        paths = self.path[lo:hi].tolist()
        targets = (self.clock[self.path[lo:hi]] + f.size_mb[lo:hi]).tolist()
        for k, (path, target) in enumerate(zip(paths, targets, strict=True)):
            heapq.heappush(self.heaps.setdefault(path, []), (target, lo + k))
        for path in set(paths):
            self._set_head(path)
        self.count_flat += np.bincount(self.path[lo:hi], minlength=self.clock.size)
        self._in_flight += hi - lo

    def _set_head(self, path: int) -> None:
        heap = self.heaps[path]
        if heap:
            self.head[path] = heap[0][0]
            self.head_size[path] = self.size_of[heap[0][1]]
        else:
            self.head[path] = np.inf
            del self.heaps[path]

    def step(
        self, policy: NetworkPolicy, horizon_s: float, per_flow: bool
    ) -> tuple[float, list[int]]:
        dt, ends, rates, befores = advance_fair(
            self.count,
            self.capacity,
            self.head,
            self.head_size,
            self.clock,
            horizon_s,
            SATURATED,
            SAME_TIME,
            MB_PER_S_PER_GBPS,
        )
        if not math.isfinite(dt):
            raise RuntimeError(f"policy {policy.name!r} gives no flow a rate: replay stuck")
        limit = dt * (1 + SAME_TIME)
        finished: list[int] = []
        left, size_of, coflow_of = self.left, self.size_of, self.coflow_of
        for path, r, before, now in zip(
            ends.tolist(), rates.tolist(), befores.tolist(), self.clock[ends].tolist(), strict=True
        ):
            heap = self.heaps[path]
            popped = 0
            while heap:
                target, flow = heap[0]
                if (target - before) / r > limit and target - now > SAME_TIME * size_of[flow]:
                    break
                heapq.heappop(heap)
                popped += 1
                g = coflow_of[flow]
                left[g] -= 1
                if left[g] == 0:
                    finished.append(g)
            self.count_flat[path] -= popped
            self._in_flight -= popped
            self._set_head(path)
        return dt, sorted(finished)


class ReferenceState:
    """The reference: bytes left per flow, the flows in flight as global indices,
    `FlowArrays` rebuilt at every event for the generic allocators."""

    def __init__(
        self, flows: TraceFlows, port_gbps: float, rates: Callable[[FlowArrays], FloatArray]
    ) -> None:
        self.flows = flows
        self.rates = rates
        self.remaining = flows.size_mb.copy()
        n_coflows = flows.bounds.shape[0] - 1
        self.attained = np.zeros(n_coflows)
        self.left = np.diff(flows.bounds)
        self.active: IntArray = np.zeros(0, dtype=np.int64)
        # Up link of port p is p, its down link ports + p.
        self.capacity = np.full(2 * flows.ports, float(port_gbps))
        self._mb_s: FloatArray | None = None  # the rates in force between reallocations

    @property
    def in_flight(self) -> int:
        return int(self.active.size)

    def admit(self, g: int) -> None:
        lo, hi = self.flows.bounds[g], self.flows.bounds[g + 1]
        self.active = np.concatenate([self.active, np.arange(lo, hi, dtype=np.int64)])
        self._mb_s = None

    def arrays(self) -> tuple[FlowArrays, IntArray]:
        act, f = self.active, self.flows
        owners, coflow = owner_runs(f.coflow[act])
        n = act.size
        src, dst = f.src[act], f.dst[act]
        arrays = FlowArrays(
            capacity_gbps=self.capacity,
            entry_flow=np.concatenate([np.arange(n), np.arange(n)]),
            entry_link=np.concatenate([src, f.ports + dst]),
            remaining_mb=self.remaining[act],
            coflow=coflow,
            path=src * f.ports + dst,
            attained_mb=self.attained[owners],
            weight=np.ones(owners.size),
            n_paths=f.ports * f.ports,
        )
        return arrays, owners

    def step(
        self, policy: NetworkPolicy, horizon_s: float, per_flow: bool
    ) -> tuple[float, list[int]]:
        """Allocate (unless the rates in force still hold), advance to the next event
        (at most `horizon_s`), and return the time advanced and the coflows (global
        indices) that completed."""
        arrays, owners = self.arrays()
        mb_s = self._mb_s
        if mb_s is None:
            mb_s = self.rates(arrays) * MB_PER_S_PER_GBPS
        size = self.flows.size_mb[self.active]
        step = Advance(
            policy,
            mb_s,
            arrays.remaining_mb,
            size,
            arrays.coflow,
            arrays.attained_mb,
            horizon_s,
            per_flow,
        )
        self.attained[owners] = step.attained
        self.remaining[self.active] = step.remaining
        finished: list[int] = []
        done = step.done
        self._mb_s = None if per_flow else mb_s
        if done.any():
            gone = self.flows.coflow[self.active[done]]
            counts = np.bincount(gone, minlength=self.left.size)
            touched = np.flatnonzero(counts)
            self.left[touched] -= counts[touched]
            finished = [int(g) for g in touched if self.left[g] == 0]
            self.active = self.active[~done]
            if finished:
                self._mb_s = None
            elif self._mb_s is not None:
                self._mb_s = self._mb_s[~done]
        return step.dt, finished
