"""The state a what-if starts from, as both modes observe it.

Built by api.whatif.forecast.observe (local mode) and api.whatif.cluster.live_state (cluster
mode); read by api.whatif.forecast.public. A module of its own so that neither of those two
imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.schemas.cluster import Clock
from controller.whatif import LiveState


@dataclass(frozen=True)
class Observed:
    """The state a what-if starts from, and what the response says about it."""

    state: LiveState
    active_policy: str
    cluster: str
    statuses: dict[str, str]  # job id -> the status shown
    approximations: tuple[str, ...] = ()
    clock: Clock = "simulated"  # cluster mode's: "wall"
