"""The networks by name: the names `--network` accepts, and each network's parts.

One `Network` entry per network says in which network model it runs (`steady`: its
coflow allocator; `phases`: its phase form), whether the simulator recomputes its
rates at every round, whether and how it runs live, and which placer wrapper it puts
around the policy's placer. Every caller reads this table instead of naming
networks: the simulator (controller.sim.bandwidth: `check`, the allocator or the
phase form), the operator (operators/network: `check_live`, the publisher and the
floor each live form needs), the replay command (`wrap_placer`, the `--network`
help) and the operator command (its `--network` help).

| network | steady | phases (sharing; offsets, levels, paths) | live | placer |
| --- | --- | --- | --- | --- |
| fair | max-min | max-min; each job's own phase | egress rates | |
| sebf, aalo, aalo-strict, sincronia | their allocator | | egress rates | |
| cassini | | max-min; CASSINI's time shifts | comm slots | CassiniPlacer |
| crux | | priority; GPU-intensity levels, paths on lanes | priority levels | |
| mltcp | | bytes-weighted (MLTCP); each job's own phase | none (kernel) | |

"dedicated" is the absence of a network (no link shared) and is accepted in every
model and live, where it publishes nothing.

A new network: write its mechanism in one module (a coflow allocator in
controller/network/allocators/ with its entry in `allocators.ALLOCATORS`; for the phase
model, the time shifts, levels or path selection its `PhaseForm` names, in
controller/network/phases/), then add one `Network` entry to `NETWORKS` below and a
test. The simulator, the operator, the CLI's validation and help, and the error
messages follow from the entry; a phase network that combines parts already there
(a sharing rule, time shifts, levels) is the entry alone. Outside the core, a
network that runs live also goes into the chart's `operator.network` enum
(helm/gpuflow/values.schema.json), and a coflow allocator into the coflow
benchmark's port forms (experiments/coflow/ports.py): their tests compare both
with the tables here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from controller.model import Cluster, Placer
from controller.network.allocators import aalo, fair, sincronia, varys
from controller.network.phases import cassini, crux
from controller.network.phases.cassini_placement import CassiniPlacer
from controller.network.phases.crux_paths import select_paths
from controller.network.phases.form import LiveForm, PhaseForm

# No network: every job has its links to itself (the perf model's default).
DEDICATED = "dedicated"
# How shared links slow jobs: one steady rate per job (controller.network.jobs) or
# compute phases and all-reduce bursts (controller.network.phases.jobs).
STEADY = "steady"
PHASES = "phases"
MODELS = (STEADY, PHASES)

# The policy's placer -> the placer a network runs with.
PlacerWrapper = Callable[[Placer, Cluster], Placer]


@dataclass(frozen=True)
class Network:
    """One network (module docstring). `allocator` names its coflow allocator in
    `allocators.ALLOCATORS` (the steady model); `time_dependent`: its allocation moves
    with attained bytes or remaining work, so the simulator also recomputes it at
    rounds; `phases`: its phase form; `placer`: the wrapper around the policy's
    placer; `not_live`: why it cannot run live, for a network that cannot."""

    name: str
    allocator: str | None = None
    time_dependent: bool = False
    phases: PhaseForm | None = None
    placer: PlacerWrapper | None = None
    not_live: str | None = None

    @property
    def models(self) -> tuple[str, ...]:
        """The network models it runs under."""
        steady = (STEADY,) if self.allocator is not None else ()
        return (*steady, *((PHASES,) if self.phases is not None else ()))

    @property
    def live_by_phases(self) -> bool:
        """Whether live it publishes its phase form (slots or levels), not egress rates."""
        return self.phases is not None and self.phases.live is not None

    @property
    def live(self) -> bool:
        """Whether the operator can run it: its phase form live, or its allocator's rates."""
        return self.live_by_phases or self.allocator is not None


NETWORKS: Mapping[str, Network] = MappingProxyType(
    {
        n.name: n
        for n in (
            Network(fair.NAME, allocator=fair.NAME, phases=PhaseForm("fair")),
            Network(varys.NAME, allocator=varys.NAME),
            Network(aalo.NAME, allocator=aalo.NAME, time_dependent=True),
            Network("aalo-strict", allocator="aalo-strict", time_dependent=True),
            Network(sincronia.NAME, allocator=sincronia.NAME, time_dependent=True),
            Network(
                "cassini",
                phases=PhaseForm("fair", time_shifts=cassini.time_shifts, live=LiveForm.SLOTS),
                placer=CassiniPlacer,
            ),
            Network(
                "crux",
                phases=PhaseForm(
                    "priority",
                    levels=crux.priorities,
                    floor_share=crux.PRIORITY_FLOOR,
                    paths=select_paths,
                    live=LiveForm.LEVELS,
                ),
            ),
            Network(
                "mltcp",
                phases=PhaseForm("mltcp"),
                not_live="its byte-weighted shares need MLTCP's congestion control in the kernel",
            ),
        )
    }
)


class NetworkError(ValueError):
    """A network, network model or combination that cannot run; the message names it."""


class NoLiveFormError(NetworkError):
    """The network has no form that can be enforced on running jobs."""


def names(model: str = STEADY) -> tuple[str, ...]:
    """`dedicated`, then the networks that run under `model` in table order."""
    return (DEDICATED, *(n.name for n in NETWORKS.values() if model in n.models))


def live_names() -> tuple[str, ...]:
    """`dedicated`, then the networks the operator can run in table order."""
    return (DEDICATED, *(n.name for n in NETWORKS.values() if n.live))


def live_phase_names() -> tuple[str, ...]:
    """The networks whose phase form runs live (slots or levels)."""
    return tuple(n.name for n in NETWORKS.values() if n.live_by_phases)


def check(network: str, model: str = STEADY) -> Network | None:
    """The entry of `network` under `model` (None for "dedicated"); NetworkError
    naming the field when either is unknown or the network has no form in `model`."""
    if model not in MODELS:
        raise NetworkError(f"unknown network model {model!r} (known: {', '.join(MODELS)})")
    if network == DEDICATED:
        return None
    entry = NETWORKS.get(network)
    if entry is not None and model in entry.models:
        return entry
    if model == PHASES:
        known = ", ".join(names(PHASES))
        raise NetworkError(f"network {network!r} has no phase-level form (known: {known})")
    if entry is not None:
        wanted = " or ".join(repr(m) for m in entry.models)
        raise NetworkError(f"network {network!r} needs the network model {wanted}")
    raise NetworkError(f"unknown network {network!r} (known: {', '.join(names(STEADY))})")


def check_live(network: str) -> Network | None:
    """The entry of `network` if the operator can run it (None for "dedicated");
    NoLiveFormError saying why for a network without a live form, NetworkError for an
    unknown name."""
    if network == DEDICATED:
        return None
    entry = NETWORKS.get(network)
    if entry is not None and entry.live:
        return entry
    if entry is not None:
        why = entry.not_live or "it has no live form"
        live = ", ".join(live_phase_names())
        raise NoLiveFormError(f"network {network!r} has no live form: {why} (live: {live})")
    raise NetworkError(f"unknown network {network!r} (known: {', '.join(live_names())})")


def phase_form(network: str) -> PhaseForm:
    """The network's phase form; NetworkError naming the known ones when it has none."""
    entry = check(network, PHASES)
    if entry is None or entry.phases is None:  # "dedicated": no links shared, no form
        known = ", ".join(names(PHASES)[1:])
        raise NetworkError(f"network {network!r} has no phase-level form (known: {known})")
    return entry.phases


def wrap_placer(placer: Placer, cluster: Cluster, network: str) -> Placer:
    """`placer` in the network's placer wrapper (CASSINI's placement under cassini),
    or itself for a network without one, "dedicated" or an unknown name."""
    entry = NETWORKS.get(network)
    if entry is None or entry.placer is None:
        return placer
    return entry.placer(placer, cluster)


def network_help() -> str:
    """The replay command's `--network` help, from the table."""
    steady = names(STEADY)
    phases = names(PHASES)[1:]
    return (
        f"bandwidth sharing among multi-node jobs: {DEDICATED} (none), "
        f"{', '.join(steady[1:-1])} or {steady[-1]}; with --network-model {PHASES}: "
        f"{', '.join(phases[:-1])} or {phases[-1]}"
    )


def live_network_help() -> str:
    """The operator command's `--network` help, from the table."""
    rates = [n.name for n in NETWORKS.values() if n.live and not n.live_by_phases]
    phases = [
        f"{n.name} ({n.phases.live.value})"
        for n in NETWORKS.values()
        if n.phases is not None and n.phases.live is not None
    ]
    return (
        f"network allocator whose per-pod egress rates the agents enforce: {', '.join(rates)};"
        f" phase networks: {', '.join(phases)}; {DEDICATED}: none"
    )
