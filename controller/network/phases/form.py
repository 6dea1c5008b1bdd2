"""A network's phase-level form: what sets its phases, its sharing and its live form.

The network registry (controller.network.registry) gives each phase network one
`PhaseForm`, and the two consumers read only the form, never the network's name:
`phases.jobs.phase_job_rates` (the simulator's `--network-model phases`) and
`phases.slots.live_phases` (the operator's live enforcement). A form combines the
parts the phase model knows:

- `sharing`: how jobs in burst share a link (a rule of `phases.SHARING_RULES`);
- `time_shifts`: the offsets of a group of jobs joined by shared links (CASSINI's
  `cassini.time_shifts`); None: each job iterates from its own (re)start, uncoordinated;
- `levels`: a priority level per job from the jobs' GPU intensities (Crux's
  `crux.priorities`), with `floor_share` of its rate alone guaranteed to each job
  under the higher levels; None: one level for all;
- `paths`: where a tier has ECMP lanes, the lane of each hop, routing the jobs in
  decreasing GPU intensity (Crux's `crux_paths.select_paths`); None: ECMP hashing;
- `live`: how it is enforced on running jobs, a comm slot per job (SLOTS, from the
  group's period and `time_shifts`) or a priority level (LEVELS, from `levels`); None:
  no live phase form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from controller.model import Cluster
from controller.network.ecmp import EcmpPath
from controller.network.jobs import NetJob
from controller.network.phases import SHARING_RULES, PhaseJob
from controller.network.phases.crux import Intensity

# (jobs of a group, each one's period in s) -> each one's offset in [0, period).
TimeShifts = Callable[[Sequence[PhaseJob], Mapping[str, float]], dict[str, float]]
# The jobs' GPU intensities -> each one's level, higher first.
Levels = Callable[[Sequence[Intensity]], dict[str, int]]
# (cluster, jobs, job ids most intense first, each one's burst MB) -> each one's
# path per hop of its ring.
PathSelection = Callable[
    [Cluster, Sequence[NetJob], Sequence[str], Mapping[str, float]], dict[str, list[EcmpPath]]
]


class LiveForm(Enum):
    """What the operator publishes on a phase network's pods (operators/network/phases.py)."""

    SLOTS = "comm slots"
    LEVELS = "priority levels"


@dataclass(frozen=True)
class PhaseForm:
    """A network under the phase model and live (module docstring)."""

    sharing: str
    time_shifts: TimeShifts | None = None
    levels: Levels | None = None
    floor_share: float = 0.0
    paths: PathSelection | None = None
    live: LiveForm | None = None

    def __post_init__(self) -> None:
        if self.sharing not in SHARING_RULES:
            known = ", ".join(SHARING_RULES)
            raise ValueError(f"unknown sharing rule {self.sharing!r} (known: {known})")
        if not 0.0 <= self.floor_share < 1.0:
            raise ValueError(f"floor_share must be in [0, 1), got {self.floor_share}")
        if self.live is LiveForm.SLOTS and self.time_shifts is None:
            raise ValueError("a live form of comm slots needs time_shifts")
        if self.live is LiveForm.LEVELS and self.levels is None:
            raise ValueError("a live form of priority levels needs levels")
