"""One round's quota figures, computed by controller.quotas.admission before the policy
and read after it by controller.quotas.protect, controller.quotas.reclaim and
controller.quotas.ledger.

Quotas are kept per *pool*: the GPUs of one model when the tree's quotas name models
(each model its own division, guarantees and limits read for that model), or every
GPU (`ANY_POOL`) when they are plain numbers. The rule itself (`within_share`,
`at_limit`) and the reasons a job waits because of a quota live in
controller.model.quotas.room, where the policies' GPU-choice filter reads them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.model import Reason, Snapshot
from controller.model.quotas.room import PoolFigures


@dataclass(frozen=True)
class Admitted(PoolFigures):
    """One pool's figures for the round (`PoolFigures`: what each queue holds and
    deserves there, the spare GPUs), with the backend's whole snapshot and who
    belongs where."""

    snapshot: Snapshot = field(kw_only=True)
    leaf: Mapping[str, str | None] = field(kw_only=True)  # active job id -> its leaf


@dataclass(frozen=True)
class Admission:
    """The round: each pool's figures, what the policy is shown, why the rest waits."""

    snapshot: Snapshot
    seen: Snapshot
    leaf: Mapping[str, str | None]
    pools: tuple[Admitted, ...]
    hidden: Mapping[str, Reason] = field(default_factory=dict)

    def deserved(self, queue: str) -> float:
        """`queue`'s deserved GPUs over every pool."""
        return sum(p.deserved.get(queue, 0.0) for p in self.pools)
