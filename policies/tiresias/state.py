"""Tiresias' cross-round memory (`Plan.state`): what `policies.tiresias` returns from
one round and is given at the next.

Its per-job records (`policies.tiresias.ledger`) are read by every round and by
`Tiresias.queue_order`; its kept rankings of the waiting and the running jobs
(`policies.tiresias.waiting`, `policies.tiresias.running`) belong to it until a round
takes them (`take_kept`), brings them to its own snapshot and hands them, with the
records, to the state it returns. A state whose rankings were taken still reads as
it did: a round given it again ranks every job from its records.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.tiresias.ledger import Ledger, Promotion, Records
from policies.tiresias.running import KeptRunning
from policies.tiresias.waiting import KeptWaiting


class TiresiasState:
    """Per active job: (queue, time it entered it) for queues below Q0, promotions
    (`policies.tiresias.ledger`, handed to the next state copy-on-write); and the
    waiting and running jobs ranked as of the round (`policies.tiresias.waiting`,
    `policies.tiresias.running`)."""

    __slots__ = ("_records", "kept", "running")

    def __init__(
        self,
        entered: Mapping[str, tuple[int, float]] | None = None,
        promotions: Mapping[str, Promotion] | None = None,
        kept: KeptWaiting | None = None,
        running: KeptRunning | None = None,
        *,
        records: Records | None = None,
    ) -> None:
        if records is None:
            records = Records(dict(entered or {}), dict(promotions or {}))
        self._records = records
        self.kept = kept
        self.running = running  # valid while `kept` is

    @property
    def entered(self) -> Mapping[str, tuple[int, float]]:
        return self._records.own()[0]

    @property
    def promotions(self) -> Mapping[str, Promotion]:
        return self._records.own()[1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TiresiasState):
            return NotImplemented
        return self._records.own() == other._records.own()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TiresiasState(entered={self.entered!r}, promotions={self.promotions!r})"

    def take_kept(self) -> tuple[KeptWaiting, KeptRunning] | None:
        """Its kept rankings, unless a round already took them (copy-on-write)."""
        kept, running = self.kept, self.running
        if kept is None or running is None or kept.holder is not self:
            return None
        kept.holder = None
        return kept, running

    def hand_on(self) -> tuple[Ledger, Records]:
        """Its records handed to the round that took its kept rankings: the ledger
        that round writes, and the records of the state it returns."""
        return self._records.hand_on()
