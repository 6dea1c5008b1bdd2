"""Tiresias' per-job records, handed from a round's state to the next copy-on-write.

Called by `policies.tiresias`: a `TiresiasState` holds its records (each active job's
queue entry below Q0 and its last promotion to Q0) as `Records`. The round that takes
a state's kept ranking also takes its records' dicts and writes into them in place
through a `Ledger`, which logs in the records it took them from the value each key
had before its first write; the next state holds the same dicts. So a round costs the
records it changes, not a copy of every active job's. Should the first state be read
again (the invariant suite calls a policy twice on one state), its records are rebuilt
once from the latest dicts with the logs undone, newest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Entered = tuple[int, float]  # (queue, time the job entered it)

_ABSENT: Any = object()  # an undo log's value for a key that was not there


@dataclass(frozen=True)
class Promotion:
    """A job's last promotion to Q0: its queue counts service from `attained_gpu_s`."""

    at_s: float
    attained_gpu_s: float
    executed_s: float
    count: int = 1


class Ledger:
    """The records being written for a round's successor state."""

    __slots__ = ("entered", "promotions", "undo_entered", "undo_promotions")

    def __init__(
        self,
        entered: dict[str, Entered],
        promotions: dict[str, Promotion],
        undo_entered: dict[str, Any] | None = None,
        undo_promotions: dict[str, Any] | None = None,
    ) -> None:
        self.entered = entered
        self.promotions = promotions
        # Where the dicts were taken from another state: their values before this
        # round's first write of each key (_ABSENT: no value).
        self.undo_entered = undo_entered
        self.undo_promotions = undo_promotions

    def note(self, job_id: str, entered: Entered | None, promo: Promotion | None) -> None:
        """A job's queue entry (None: it is in Q0) and its promotion, if any."""
        undo = self.undo_entered
        if undo is not None and job_id not in undo:
            undo[job_id] = self.entered.get(job_id, _ABSENT)
        if entered is not None:
            self.entered[job_id] = entered
        else:
            self.entered.pop(job_id, None)
        if promo is not None:
            undo = self.undo_promotions
            if undo is not None and job_id not in undo:
                undo[job_id] = self.promotions.get(job_id, _ABSENT)
            self.promotions[job_id] = promo

    def forget(self, job_id: str) -> None:
        """The job has left."""
        for records, undo in (
            (self.entered, self.undo_entered),
            (self.promotions, self.undo_promotions),
        ):
            old = records.pop(job_id, _ABSENT)
            if undo is not None and job_id not in undo:
                undo[job_id] = old


class Records:
    """One state's records: its own dicts, or, once handed on, the next records' with
    the changes logged since undone."""

    __slots__ = ("_entered", "_next", "_promotions", "_undo")

    def __init__(self, entered: dict[str, Entered], promotions: dict[str, Promotion]) -> None:
        self._entered = entered
        self._promotions = promotions
        self._next: Records | None = None
        self._undo: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    def own(self) -> tuple[dict[str, Entered], dict[str, Promotion]]:
        """Its entries and promotions (rebuilt once if they were handed on)."""
        if self._next is not None:
            self._rebuild()
        return self._entered, self._promotions

    def hand_on(self) -> tuple[Ledger, Records]:
        """Give its dicts to a round: the ledger that writes into them (logging what it
        overwrites here) and the records of the state that round returns."""
        entered, promotions = self.own()
        self._next = Records(entered, promotions)
        self._undo = ({}, {})
        return Ledger(entered, promotions, *self._undo), self._next

    def _rebuild(self) -> None:
        logs = []
        head: Records = self
        while head._next is not None:
            logs.append(head._undo)
            head = head._next
        entered, promotions = dict(head._entered), dict(head._promotions)
        for undo_entered, undo_promotions in reversed(logs):
            for records, undo in ((entered, undo_entered), (promotions, undo_promotions)):
                for key, old in undo.items():
                    if old is _ABSENT:
                        records.pop(key, None)
                    else:
                        records[key] = old
        self._entered, self._promotions = entered, promotions
        self._next, self._undo = None, ({}, {})
