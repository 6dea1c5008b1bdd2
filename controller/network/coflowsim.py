"""Event-driven replay of a coflow benchmark trace, in the model of coflowsim.

coflowsim (github.com/coflow/coflowsim, Chowdhury's reference simulator) is the
model; read there in `Simulator.simulate`, `CoflowSimulator`, `Constants`, `Job`:

- Every port (a rack: coflowsim merges tasks by rack, one machine per rack for this
  trace) has one link up and one down, 1 Gbit/s each (`port_gbps`). coflowsim moves
  2^30 bit per 1,024 ms (RACK_BITS_PER_SEC over SIMULATION_SECOND_MILLIS), i.e.
  1 MiB per 8 ms or 1.048576 Gbit/s; pass `port_gbps=1.048576` to match its clock.
- A flow from mapper port m to reducer port r crosses m's up link and r's down link,
  also when m == r (coflowsim does not short-cut them).
- Coflows are admitted at epoch boundaries, EPOCH_IN_MILLIS = 10 x 1,024 ms: at the
  epoch starting at k·10.24 s coflowsim admits every coflow with arrival
  <= (k+1)·10.24 s, so a coflow starts at k = max(0, ceil(arrival / epoch) - 1),
  possibly before its arrival stamp, and its CCT counts from that epoch start
  (Task.startTask(CURRENT_TIME), Job.getSimulatedDuration).

When rates are recomputed follows coflowsim too (`ReplayConfig.reallocate`, default
"coflowsim"): its coflow schedulers (`CoflowSimulator` for SEBF, `CoflowSimulatorDark`
for Aalo) recompute rates only in `afterJobAdmission` and `afterJobDeparture`, so a
finished flow's bandwidth stays idle until the next coflow arrives or leaves, and
Aalo's queues are re-sorted only then; its flow-level `FlowSimulator` (FAIR)
recomputes the shares at every 8 ms quantum, i.e. whenever a flow has finished.
"coflowsim" therefore reallocates at coflow admissions and departures for the
coflow policies (sebf, aalo, aalo-strict, sincronia) and at every flow completion
for fair. "flow" reallocates at every flow completion (and at Aalo's queue
thresholds) for every policy: work-conserving at all times, not coflowsim's model,
and ~10^5 events on the FB trace. "coflow" uses the coflow rule for every policy.

Unlike coflowsim, which advances fixed 8 ms quanta, this replay is event-driven:
rates are constant between events and progress is advanced analytically, so
completion times are exact, not rounded up to 8 ms.

Two implementations of one event loop: `replay` keeps the flows in flight as
compact arrays with flow counts per (up, down) path and allocates with the
port-fabric forms of the policies (`controller.network.ports`: water-filling on a
P x P matrix of paths instead of the flows x links incidence); `replay_reference`
rebuilds `FlowArrays` at every event for the generic allocators. They take the same
events and give the same completion times up to float rounding
(tests/controller/network/test_ports.py checks it on slices of the FB trace).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.network._filling import advance_fair
from controller.network.allocators import NetworkPolicy, get_policy
from controller.network.model import MB_PER_S_PER_GBPS
from controller.network.ports import PORT_RATES, PortArrays
from controller.network.problem import FloatArray, FlowArrays, IntArray
from controller.network.trace import MB_PER_MIB, CoflowTrace, TraceCoflow
from controller.network.waterfill import SATURATED

EPOCH_MS = 10 * 1024  # coflowsim CoflowSim.main: 10 x SIMULATION_SECOND_MILLIS
# Varys §7 (Table 3) bins: short if the longest flow is under 5 MB, narrow if at
# most 50 flows.
SHORT_MB = 5.0
NARROW_FLOWS = 50
# A flow whose finish time is within this fraction of the step is done in it.
_SAME_TIME = 1e-9


REALLOCATE = ("coflowsim", "flow", "coflow")
# coflowsim's flow-level simulator (FlowSimulator) serves these; every other policy
# is a coflow scheduler that reallocates only at coflow arrivals and departures.
_FLOW_LEVEL = frozenset({"fair"})


@dataclass(frozen=True)
class ReplayConfig:
    port_gbps: float = 1.0
    epoch_ms: int = EPOCH_MS
    reallocate: str = "coflowsim"  # one of REALLOCATE

    def __post_init__(self) -> None:
        if not self.port_gbps > 0:
            raise ValueError(f"port_gbps must be > 0, not {self.port_gbps!r}")
        if self.epoch_ms <= 0:
            raise ValueError(f"epoch_ms must be > 0, not {self.epoch_ms!r}")
        if self.reallocate not in REALLOCATE:
            raise ValueError(
                f"reallocate must be one of {', '.join(REALLOCATE)}, not {self.reallocate!r}"
            )

    def per_flow(self, policy: str) -> bool:
        """Whether `policy` reallocates at every flow completion (else only when a
        coflow is admitted or leaves)."""
        if self.reallocate == "coflowsim":
            return policy in _FLOW_LEVEL
        return self.reallocate == "flow"


@dataclass(frozen=True)
class CoflowOutcome:
    coflow_id: int
    arrival_s: float
    start_s: float  # the epoch start it was admitted at
    finish_s: float
    n_flows: int
    longest_flow_mb: float  # in the trace's MB (MiB), as the bins are defined

    @property
    def cct_s(self) -> float:
        return self.finish_s - self.start_s

    @property
    def bin(self) -> str:
        length = "S" if self.longest_flow_mb < SHORT_MB else "L"
        width = "N" if self.n_flows <= NARROW_FLOWS else "W"
        return length + width


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    outcomes: tuple[CoflowOutcome, ...]
    events: int
    wall_s: float

    @property
    def avg_cct_s(self) -> float:
        return float(np.mean([o.cct_s for o in self.outcomes])) if self.outcomes else 0.0

    @property
    def p95_cct_s(self) -> float:
        if not self.outcomes:
            return 0.0
        return float(np.percentile([o.cct_s for o in self.outcomes], 95))

    def bin_avg_cct_s(self) -> dict[str, float | None]:
        """Average CCT per bin (SN, LN, SW, LW); None for an empty bin."""
        out: dict[str, float | None] = {}
        for name in ("SN", "LN", "SW", "LW"):
            ccts = [o.cct_s for o in self.outcomes if o.bin == name]
            out[name] = float(np.mean(ccts)) if ccts else None
        return out


def admission_ms(arrival_ms: int, epoch_ms: int = EPOCH_MS) -> int:
    """Start of the epoch at which coflowsim admits a coflow arriving at `arrival_ms`."""
    k = max(0, -(-arrival_ms // epoch_ms) - 1)
    return k * epoch_ms


class _Flows:
    """All flows of the trace as arrays, laid out coflow by coflow in FIFO order."""

    def __init__(self, coflows: list[TraceCoflow], ports: int) -> None:
        src, dst, size, owner = [], [], [], []
        for g, c in enumerate(coflows):
            m, r = len(c.mappers), len(c.reducers)
            src.append(np.repeat(np.array(c.mappers, dtype=np.int64), r))
            dst.append(np.tile(np.array(c.reducers, dtype=np.int64), m))
            size.append(np.tile(np.array(c.reducer_flow_mib, dtype=np.float64), m))
            owner.append(np.full(m * r, g, dtype=np.int64))
        self.src = np.concatenate(src) if src else np.zeros(0, dtype=np.int64)
        self.dst = np.concatenate(dst) if dst else np.zeros(0, dtype=np.int64)
        self.size_mb = (np.concatenate(size) if size else np.zeros(0)) * MB_PER_MIB
        self.coflow = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
        self.ports = ports
        counts = np.array([c.n_flows for c in coflows], dtype=np.int64)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def replay(trace: CoflowTrace, policy: str, config: ReplayConfig | None = None) -> ReplayResult:
    """Replay `trace` under the network policy named `policy`.

    Policies with a port-fabric form (`ports.PORT_RATES`: all of `POLICIES` today)
    run there, on compact arrays with per-path counts; any other falls back to the
    generic `FlowArrays` path of `replay_reference`. Fair sharing reallocated at
    every flow completion runs on per-path clocks (`_PathState`): its events cost
    O(paths), not O(flows in flight).
    """
    chosen = get_policy(policy)
    cfg = config or ReplayConfig()
    if chosen.name == "fair" and cfg.per_flow(chosen.name):
        return _run(trace, chosen, cfg, _PathState)
    fast = PORT_RATES.get(chosen.name)
    if fast is None:
        return replay_reference(trace, policy, cfg)
    return _run(trace, chosen, cfg, lambda flows, gbps: _PortState(flows, gbps, fast))


def replay_reference(
    trace: CoflowTrace, policy: str, config: ReplayConfig | None = None
) -> ReplayResult:
    """The same replay on the generic `FlowArrays` allocators, rebuilt at every event:
    the oracle the fast path is tested against (fine for a few dozen coflows)."""
    chosen = get_policy(policy)
    return _run(trace, chosen, config, lambda flows, gbps: _State(flows, gbps, chosen.rates))


class _Stepper(Protocol):
    def admit(self, g: int) -> None: ...

    @property
    def in_flight(self) -> int: ...

    def step(
        self, policy: NetworkPolicy, horizon_s: float, per_flow: bool
    ) -> tuple[float, list[int]]: ...


def _run(
    trace: CoflowTrace,
    chosen: NetworkPolicy,
    config: ReplayConfig | None,
    make_state: Callable[[_Flows, float], _Stepper],
) -> ReplayResult:
    cfg = config or ReplayConfig()
    started = time.perf_counter()
    coflows = sorted(trace.coflows, key=lambda c: (c.arrival_ms, c.coflow_id))
    admit_s = [admission_ms(c.arrival_ms, cfg.epoch_ms) / 1000.0 for c in coflows]
    state = make_state(_Flows(coflows, trace.ports), cfg.port_gbps)
    finish = [math.nan] * len(coflows)
    per_flow = cfg.per_flow(chosen.name)
    events = 0
    admitted = 0
    now = 0.0
    while admitted < len(coflows) or state.in_flight:
        while admitted < len(coflows) and admit_s[admitted] <= now + 1e-9:
            state.admit(admitted)
            admitted += 1
        if not state.in_flight:
            now = admit_s[admitted]
            continue
        horizon = admit_s[admitted] - now if admitted < len(coflows) else math.inf
        dt, done = state.step(chosen, horizon, per_flow)
        events += 1
        now += dt
        for g in done:
            finish[g] = now
    outcomes = tuple(
        CoflowOutcome(
            coflow_id=c.coflow_id,
            arrival_s=c.arrival_ms / 1000.0,
            start_s=admit_s[g],
            finish_s=finish[g],
            n_flows=c.n_flows,
            longest_flow_mb=float(c.longest_flow_mib),
        )
        for g, c in enumerate(coflows)
    )
    return ReplayResult(chosen.name, outcomes, events, time.perf_counter() - started)


class _Advance:
    """One step of the event loop, shared by both states: given every in-flight
    flow's rate, the time to the next event and the progress made by then.

    With `per_flow` the next event is the first flow completion, an Aalo threshold
    crossing or `horizon_s`; without, it is the first coflow completion (its last
    flow's) or `horizon_s`: flows that finish earlier just stop, as in coflowsim.
    `coflow` (the flows' coflow index) must be non-decreasing.
    """

    def __init__(
        self,
        policy: NetworkPolicy,
        mb_s: FloatArray,
        remaining: FloatArray,
        size: FloatArray,
        coflow: IntArray,
        attained: FloatArray,
        horizon_s: float,
        per_flow: bool,
    ) -> None:
        with np.errstate(divide="ignore"):
            t_flow = np.where(mb_s > 0, remaining / mb_s, np.inf)
        thresholds = policy.thresholds if per_flow else None
        if per_flow:
            dt = min(float(t_flow.min()), horizon_s)
        else:
            starts = np.flatnonzero(np.diff(coflow, prepend=-1))
            dt = min(float(np.maximum.reduceat(t_flow, starts).min()), horizon_s)
        coflow_mb_s = np.bincount(coflow, weights=mb_s, minlength=attained.size)
        t_cross = np.full(attained.size, np.inf)
        threshold = t_cross
        if thresholds is not None:
            threshold = thresholds(attained)
            with np.errstate(divide="ignore", invalid="ignore"):
                t_cross = np.where(coflow_mb_s > 0, (threshold - attained) / coflow_mb_s, np.inf)
            dt = min(dt, float(t_cross.min()))
        if not math.isfinite(dt):
            raise RuntimeError(f"policy {policy.name!r} gives no flow a rate: replay stuck")
        limit = dt * (1 + _SAME_TIME)
        moved = np.minimum(mb_s * dt, remaining)
        new_attained = attained + np.bincount(coflow, weights=moved, minlength=attained.size)
        if thresholds is not None:
            crossed = t_cross <= limit
            new_attained[crossed] = np.maximum(new_attained[crossed], threshold[crossed])
        new_rem = remaining - moved
        done = (t_flow <= limit) | (new_rem <= _SAME_TIME * size)
        new_rem[done] = 0.0
        self.dt = dt
        self.attained = new_attained
        self.remaining = new_rem
        self.done = done


def _runs(owner: IntArray) -> tuple[IntArray, IntArray]:
    """For a non-decreasing `owner` per flow: the distinct owners and each flow's
    index among them."""
    change = np.empty(owner.size, dtype=bool)
    change[:1] = True
    np.not_equal(owner[1:], owner[:-1], out=change[1:])
    local: IntArray = (np.cumsum(change) - 1).astype(np.int64)
    owners: IntArray = owner[change].astype(np.int64)
    return owners, local


class _PortState:
    """The flows in flight as compact arrays (coflow by coflow, FIFO), flow counts
    per path kept up to date, rates from a `ports` function."""

    def __init__(
        self, flows: _Flows, port_gbps: float, rates: Callable[[PortArrays], FloatArray]
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
            self._runs = _runs(self.owner)
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
        step = _Advance(policy, mb_s, self.rem, self.size, local, attained, horizon_s, per_flow)
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


class _PathState:
    """Fair sharing, reallocated at every flow completion, kept per path.

    Max-min fairness gives every flow of a path (up link, down link) the same rate,
    so a path needs one clock: the MB each of its flows has been served since the
    start. A flow admitted when its path's clock reads c finishes when the clock
    reads c + size; each path keeps a heap of those targets, and an event costs a
    filling plus a few passes over the P x P paths, however many flows are in
    flight (up to 155,000 on the FB trace). Completion rules as `_Advance`.
    """

    def __init__(self, flows: _Flows, port_gbps: float) -> None:
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
            _SAME_TIME,
            MB_PER_S_PER_GBPS,
        )
        if not math.isfinite(dt):
            raise RuntimeError(f"policy {policy.name!r} gives no flow a rate: replay stuck")
        limit = dt * (1 + _SAME_TIME)
        finished: list[int] = []
        left, size_of, coflow_of = self.left, self.size_of, self.coflow_of
        for path, r, before, now in zip(
            ends.tolist(), rates.tolist(), befores.tolist(), self.clock[ends].tolist(), strict=True
        ):
            heap = self.heaps[path]
            popped = 0
            while heap:
                target, flow = heap[0]
                if (target - before) / r > limit and target - now > _SAME_TIME * size_of[flow]:
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


class _State:
    """The reference: bytes left per flow, the flows in flight as global indices,
    `FlowArrays` rebuilt at every event for the generic allocators."""

    def __init__(
        self, flows: _Flows, port_gbps: float, rates: Callable[[FlowArrays], FloatArray]
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
        owners, coflow = _runs(f.coflow[act])
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
        step = _Advance(
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
