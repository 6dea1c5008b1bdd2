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

This module holds the configuration, the results and the event loop; called by
`gpuflow coflow` (gpuflow/coflow_cmd.py) and bench/coflow.py. The loop keeps the
flows in flight in one of the states of experiments/coflow/states.py,
which share the trace layout and the step of experiments/coflow/flows.py.
Two implementations of one event loop: `replay` keeps the flows in flight as
compact arrays with flow counts per (up, down) path and allocates with the
port-fabric forms of the policies (`experiments.coflow.ports`: water-filling on a
P x P matrix of paths instead of the flows x links incidence); `replay_reference`
rebuilds `FlowArrays` at every event for the generic allocators. They take the same
events and give the same completion times up to float rounding
(tests/experiments/coflow/test_ports.py checks it on slices of the FB trace).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.network.allocators import NetworkPolicy, get_policy
from experiments.coflow.flows import TraceFlows
from experiments.coflow.ports import PORT_RATES
from experiments.coflow.states import PathState, PortState, ReferenceState
from experiments.coflow.trace import CoflowTrace

EPOCH_MS = 10 * 1024  # coflowsim CoflowSim.main: 10 x SIMULATION_SECOND_MILLIS
# Varys §7 (Table 3) bins: short if the longest flow is under 5 MB, narrow if at
# most 50 flows.
SHORT_MB = 5.0
NARROW_FLOWS = 50


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
class CoflowReplayResult:
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


def replay(
    trace: CoflowTrace, policy: str, config: ReplayConfig | None = None
) -> CoflowReplayResult:
    """Replay `trace` under the network policy named `policy`.

    Policies with a port-fabric form (`ports.PORT_RATES`: all of `ALLOCATORS` today)
    run there, on compact arrays with per-path counts; any other falls back to the
    generic `FlowArrays` path of `replay_reference`. Fair sharing reallocated at
    every flow completion runs on per-path clocks (`PathState`): its events cost
    O(paths), not O(flows in flight).
    """
    chosen = get_policy(policy)
    cfg = config or ReplayConfig()
    if chosen.name == "fair" and cfg.per_flow(chosen.name):
        return _run(trace, chosen, cfg, PathState)
    fast = PORT_RATES.get(chosen.name)
    if fast is None:
        return replay_reference(trace, policy, cfg)
    return _run(trace, chosen, cfg, lambda flows, gbps: PortState(flows, gbps, fast))


def replay_reference(
    trace: CoflowTrace, policy: str, config: ReplayConfig | None = None
) -> CoflowReplayResult:
    """The same replay on the generic `FlowArrays` allocators, rebuilt at every event:
    the oracle the fast path is tested against (fine for a few dozen coflows)."""
    chosen = get_policy(policy)
    return _run(
        trace, chosen, config, lambda flows, gbps: ReferenceState(flows, gbps, chosen.rates)
    )


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
    make_state: Callable[[TraceFlows, float], _Stepper],
) -> CoflowReplayResult:
    cfg = config or ReplayConfig()
    started = time.perf_counter()
    coflows = sorted(trace.coflows, key=lambda c: (c.arrival_ms, c.coflow_id))
    admit_s = [admission_ms(c.arrival_ms, cfg.epoch_ms) / 1000.0 for c in coflows]
    state = make_state(TraceFlows(coflows, trace.ports), cfg.port_gbps)
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
    return CoflowReplayResult(chosen.name, outcomes, events, time.perf_counter() - started)
