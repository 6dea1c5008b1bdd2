"""Queue positions and who preempted whom, in a DLJob's status.

PlanApplier.apply (operators/applier.py) writes, from the round's record
(controller.decisions, handed over by the operator's Controller.on_round):
`status.queuePosition`, a waiting job's 1-based place in the active policy's order
(removed when it starts), and `status.preemptedBy`, the database ids
(`resources.database_id`) of the jobs given a stopped job's GPUs in that round, also
named in its Preempted or Suspended condition's message ("preempted by job <id>").
The API's follower reads both (api.cluster_mode.history).

Positions are throttled (`PositionThrottle`): when a job at the head starts, every
waiting job moves up one place, and writing them all would cost a request per waiting
job per round (thousands, at 10,000 DLJobs). A position is written when the job has
none yet, when it is in the first POSITION_EXACT places (where one place matters to
the people waiting), when it moved by at least POSITION_DRIFT of its old value, or,
at most POSITION_REFRESH_BUDGET jobs a round (nearest the head first), when the
value written is POSITION_REFRESH_S old: farther back it is at most that stale.
A job that starts loses its position with its start's own write.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping

from controller.decisions import RoundRecord
from operators.dljobs.resources import database_id
from operators.jobs import JobRecord
from operators.kube import Obj

QUEUE_POSITION = "queuePosition"
# Places written exactly whenever they change: the head of the queue, which the
# dashboard and `gpuflow jobs` show first.
POSITION_EXACT = 10
# A move by this fraction of the old place (10 %: 200 -> 180) is written at once.
POSITION_DRIFT = 0.1
# A place written this long ago is rewritten when it changed (the PENDING_REFRESH_S
# of the why-pending message, operators/writer.py, tripled: a place is less urgent).
POSITION_REFRESH_S = 30.0
# Stale places refreshed per round at most: spreads the refresh of a long queue over
# rounds (the operator's writers send ~100 writes in well under a second).
POSITION_REFRESH_BUDGET = 100
PREEMPTED_BY = "preemptedBy"
Mutator = Callable[[Obj], Obj | None]


def takers(record: RoundRecord | None, key: str, records: Mapping[str, JobRecord]) -> list[str]:
    """The database ids of the jobs given the GPUs of job `key` (none if not moved)."""
    moved = record.displaced.get(key) if record is not None else None
    if moved is None:
        return []
    return [database_id(records[j].obj) for j in moved.by if j in records]


def preempted_by(ids: list[str]) -> str:
    """The part of a stop's message that names who took the GPUs ("" if nobody)."""
    return "; preempted by " + ", ".join(f"job {i}" for i in ids) if ids else ""


def position_mutator(position: int | None) -> Mutator:
    """Set (or, with None, remove) status.queuePosition; None when already so."""

    def mutate(obj: Obj) -> Obj | None:
        status = obj.get("status") or {}
        if status.get(QUEUE_POSITION) == position:
            return None
        new_status = {k: v for k, v in status.items() if k != QUEUE_POSITION}
        if position is not None:
            new_status[QUEUE_POSITION] = position
        new = copy.copy(obj)
        new["status"] = new_status
        return new

    return mutate


def without_position(mutate: Mutator) -> Mutator:
    """`mutate`, then status.queuePosition removed (a job that starts waits no more)."""

    def both(obj: Obj) -> Obj | None:
        new = mutate(obj)
        if new is None:
            return position_mutator(None)(obj)
        return position_mutator(None)(new) or new

    return both


class PositionThrottle:
    """Which waiting jobs' queue positions to write this round (see the module's
    docstring); PlanApplier.apply calls `due` once a round and writes what it yields."""

    def __init__(self) -> None:
        self._written_s: dict[str, float] = {}  # job -> when its position was written

    def due(
        self, positions: Mapping[str, int], written: Mapping[str, int | None], now: float
    ) -> Iterator[tuple[str, int]]:
        """(job, position) to write, of `positions` (this round's, by job) against
        `written` (what each job's status holds)."""
        stale: list[tuple[int, str]] = []
        kept = {}
        for key, position in positions.items():
            old = written.get(key)
            at = self._written_s.get(key)
            if at is not None:
                kept[key] = at
            if old == position:
                continue
            if old is None or position <= POSITION_EXACT or moved(old, position):
                kept[key] = now
                yield key, position
            elif at is None or now - at >= POSITION_REFRESH_S:
                stale.append((position, key))
        for position, key in sorted(stale)[:POSITION_REFRESH_BUDGET]:
            kept[key] = now
            yield key, position
        self._written_s = kept  # jobs no longer waiting are forgotten


def moved(old: int, new: int) -> bool:
    """Whether a place changed by at least POSITION_DRIFT of the old one."""
    return abs(new - old) >= POSITION_DRIFT * old
