"""Local mode's runtime state in the job database, so that a restart keeps it.

What an admin sets at runtime — the active policy (PUT /policies/active) and the
nodes cordoned or drained (POST /nodes/{name}/cordon|drain|uncordon) — is written
here before it takes effect, and the simulated clock by each tick of local mode's
ticker. `api.local_mode.backend.LocalMode.start` reads it back before any job is resubmitted:
the policy (see `chosen_policy` for when `--policy` wins), the cordons and drains,
and a clock that resumes at the latest time recorded, so that no job's timeline
runs backwards across a restart (docs/api.md, "Local mode across restarts").
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from api.store.models import JobEvent, LocalSetting, NodeMaintenance
from controller.maintenance import NodeAction

POLICY = "policy"
CLOCK = "clock"


@dataclass(frozen=True)
class Maintenance:
    node: str
    action: NodeAction
    by: str


@dataclass(frozen=True)
class SavedState:
    policy: str | None  # the last policy an admin switched to (or --policy stored)
    clock_s: float  # where the simulated clock stopped: never before a recorded event
    maintenance: tuple[Maintenance, ...]


def load(session: Session) -> SavedState:
    settings = {s.name: s.value for s in session.scalars(select(LocalSetting))}
    policy = settings.get(POLICY, {}).get("name")
    ticked = float(settings.get(CLOCK, {}).get("sim_s", 0.0))
    # The ticker writes the clock each tick; an event may come after the last write.
    latest_event = session.scalar(select(func.max(JobEvent.sim_s))) or 0.0
    rows = session.scalars(select(NodeMaintenance).order_by(NodeMaintenance.node))
    maintenance = tuple(Maintenance(r.node, NodeAction(r.action), r.set_by) for r in rows)
    return SavedState(
        policy=policy if isinstance(policy, str) else None,
        clock_s=max(ticked, float(latest_event)),
        maintenance=maintenance,
    )


def chosen_policy(given: str, explicit: bool, saved: str | None) -> str:
    """The policy local mode starts with: one given explicitly (`--policy`,
    GPUFLOW_POLICY) wins and replaces the stored one; without one, the stored policy
    (an admin's last switch); with neither, the default."""
    if explicit or saved is None:
        return given
    return saved


def save_policy(session: Session, name: str, by: str | None) -> None:
    _put(session, POLICY, {"name": name}, by)


def save_clock(session: Session, sim_s: float) -> None:
    _put(session, CLOCK, {"sim_s": sim_s}, None)


def save_maintenance(
    session: Session, node: str, action: NodeAction, by: str, sim_s: float
) -> None:
    if action is NodeAction.UNCORDON:
        session.execute(delete(NodeMaintenance).where(NodeMaintenance.node == node))
        return
    session.merge(NodeMaintenance(node=node, action=action.value, set_by=by, sim_s=sim_s))


def _put(session: Session, name: str, value: dict[str, object], by: str | None) -> None:
    session.merge(LocalSetting(name=name, value=value, set_by=by))
