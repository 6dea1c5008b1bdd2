"""Queue positions and who preempted whom, in a DLJob's status.

KubeBackend.apply (operators/backend.py) writes, from the round's record
(controller.decisions, handed over by the operator's Controller.on_round):
`status.queuePosition`, a waiting job's 1-based place in the active policy's order
(removed when it starts), and `status.preemptedBy`, the database ids
(`resources.database_id`) of the jobs given a stopped job's GPUs in that round, also
named in its Preempted or Suspended condition's message ("preempted by job <id>").
The API's follower reads both (api.dljob_history).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

from controller.decisions import RoundRecord
from operators.jobs import JobRecord
from operators.kube import Obj
from operators.resources import database_id

QUEUE_POSITION = "queuePosition"
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
