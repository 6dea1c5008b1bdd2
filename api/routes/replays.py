"""Replays and sweeps: submit, progress, results, plots.

A request only checks and stores: replay rows are committed as queued, and the
dispatcher (api.tasks.start_next, api.replays.dispatch) sends those that free slots go
to, fairly across tenants, to the broker or the in-process runner; the cluster is
built and the trace loaded there, never in the request's thread. If the broker is
down (whether or not the request's replays were sent at once), the request's rows
are deleted again, so a 503 leaves no orphan row and a 202 is never lost. With an
`Idempotency-Key`, the key is committed with the rows (api.store.idempotency): a retry gets
the first 202 and queues nothing; a 503 leaves the key unused.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from api.deps import CurrentUser, SessionDep, SettingsDep, can_see
from api.field_errors import invalid
from api.http.errors import BROKER_DOWN_DETAIL, unavailable
from api.replays.series import DOWNLOADS, DownloadName, SeriesMissing, read_series
from api.schemas.common import INT32_MAX, Limit, Responses, Skip
from api.schemas.replays import (
    ReplayCreate,
    ReplayOptions,
    ReplayPublic,
    ReplayResults,
    ReplaySeries,
    ReplaysPublic,
    SweepCreate,
    SweepPublic,
)
from api.settings import Settings
from api.store.idempotency import REPLAYS, SWEEPS, Once, key_header
from api.store.models import Replay, Sweep, TraceFile, User
from api.tasks import check_broker, start_next
from controller.placement import PLACERS
from controller.spec import ClusterSpecError, named_cluster_gpus
from policies.registry import POLICIES

log = logging.getLogger(__name__)
router = APIRouter(prefix="/replays", tags=["replays"])
NOT_FOUND: Responses = {404: {"description": "no such replay (or another tenant's)"}}
ACCEPTED: Responses = {
    429: {"description": "the tenant's replays queued or running are at their cap"},
    503: {"description": "broker or database unavailable; nothing was queued"},
}
IdempotencyKeyHeader = Annotated[
    str | None,
    key_header(
        "a retry with the same key (same user, same body, within 24 h) gets the first "
        "answer and queues nothing new"
    ),
]


def _invalid(loc: tuple[str | int, ...], msg: str, value: object) -> RequestValidationError:
    return invalid(("body", *loc), msg, value)


def _label(loc: tuple[str | int, ...]) -> str:
    """`("clusters", 2)` -> `clusters[2]`, the field as a client wrote it."""
    return str(loc[0]) + "".join(f"[{i}]" for i in loc[1:])


def check_cluster(loc: tuple[str | int, ...], name: str) -> None:
    """A caller's cluster is a preset, PRESET:N or NODESxGPUS, checked without opening
    any file and without building it (`named_cluster_gpus`: the runner builds it, not
    the request's thread): a 422 naming the field otherwise, never a path read."""
    try:
        named_cluster_gpus(name)
    except ClusterSpecError as exc:
        raise _invalid(loc, f"{_label(loc)}: {exc.message}", name) from None


def _check_run(
    session: Session,
    user: User,
    trace: tuple[tuple[str | int, ...], int],
    policy: tuple[tuple[str | int, ...], str],
    placement: str,
) -> None:
    """Each argument is (where the body holds it, its value), so a 422 names the field."""
    (trace_loc, trace_id), (policy_loc, policy_name) = trace, policy
    row = session.get(TraceFile, trace_id)
    if row is None or not can_see(user, row.tenant):
        raise _invalid(trace_loc, f"no trace {trace_id}", trace_id)
    if policy_name not in POLICIES:
        raise _invalid(policy_loc, f"unknown policy; known: {sorted(POLICIES)}", policy_name)
    if placement not in PLACERS:
        raise _invalid(("placement",), f"unknown placement; known: {sorted(PLACERS)}", placement)


def _check_quota(session: Session, user: User, settings: Settings, adding: int) -> None:
    """429 if the tenant's replays queued or running, with `adding` more, pass its cap
    (the replay workers are shared: one tenant must not queue everyone else out)."""
    active = session.scalar(
        select(func.count())
        .select_from(Replay)
        .where(Replay.tenant == user.tenant, Replay.status.in_(("queued", "running")))
    )
    cap = settings.max_active_replays_per_tenant
    if (active or 0) + adding > cap:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"tenant {user.tenant!r} has {active} replays queued or running and asks for "
            f"{adding} more; at most {cap} (settings max_active_replays_per_tenant)",
            headers={"Retry-After": "60"},
        )


def _row(user: User, trace_id: int, policy: str, cluster: str, opts: ReplayOptions) -> Replay:
    return Replay(
        tenant=user.tenant,
        user_id=user.id,
        trace_id=trace_id,
        policy=policy,
        cluster=cluster,
        status="queued",
        progress=0.0,
        **opts.model_dump(include={"placement", "interval_s", "seed", "max_time_s"}),
    )


def _queue(
    request: Request,
    settings: Settings,
    session: Session,
    rows: list[Replay],
    sweep: Sweep | None,
    once: Once,
) -> None:
    ids = [r.id for r in rows]
    try:
        sent = start_next(settings, request.app.state.sessions, request.app.state.executor)
        if settings.broker_url and not set(sent) & set(ids):
            check_broker(settings)  # every slot busy: still a 503 if it could not be sent
    except Exception as exc:
        session.execute(delete(Replay).where(Replay.id.in_(ids)))
        if sweep is not None:
            session.delete(sweep)
        once.release(session)
        session.commit()
        log.warning("replays %s not queued: %s", ids, exc)
        raise unavailable(BROKER_DOWN_DETAIL) from None


def public(row: Replay) -> ReplayPublic:
    data = {c: getattr(row, c) for c in ReplayPublic.model_fields if c != "plots"}
    return ReplayPublic(**data, plots=sorted(row.plots or {}))


@router.post("", status_code=202, response_model=ReplayPublic, responses=ACCEPTED)
def submit_replay(
    body: ReplayCreate,
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> ReplayPublic:
    """Replay an uploaded trace under a policy on a cluster (preset or NODESxGPUS).

    With an `Idempotency-Key`, a retry of the same request answers as the first."""
    once = Once(idempotency_key, user, REPLAYS, body)
    first = once.first(session)
    if first is not None:
        return ReplayPublic.model_validate(first)
    _check_run(
        session,
        user,
        (("trace_id",), body.trace_id),
        (("policy",), body.policy),
        body.placement,
    )
    check_cluster(("cluster",), body.cluster)
    _check_quota(session, user, settings, 1)
    row = _row(user, body.trace_id, body.policy, body.cluster, body)
    session.add(row)
    session.flush()
    answer = public(row)
    first = once.commit(session, answer)
    if first is not None:
        return ReplayPublic.model_validate(first)
    _queue(request, settings, session, [row], None, once)
    return answer


@router.post("/sweeps", status_code=202, response_model=SweepPublic, responses=ACCEPTED)
def submit_sweep(
    body: SweepCreate,
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> SweepPublic:
    """Every trace x policy x cluster, one replay each, spread over the workers.

    With an `Idempotency-Key`, a retry of the same request answers as the first."""
    once = Once(idempotency_key, user, SWEEPS, body)
    first = once.first(session)
    if first is not None:
        return SweepPublic.model_validate(first)
    size = len(body.trace_ids) * len(body.policies) * len(body.clusters)
    if size > settings.max_sweep_replays:
        raise _invalid(
            ("clusters",),
            f"a sweep of {size} replays (trace_ids x policies x clusters); at most "
            f"{settings.max_sweep_replays} (settings max_sweep_replays)",
            size,
        )
    for i, name in enumerate(body.clusters):
        check_cluster(("clusters", i), name)
    for i, t in enumerate(body.trace_ids):
        for j, p in enumerate(body.policies):
            _check_run(
                session,
                user,
                (("trace_ids", i), t),
                (("policies", j), p),
                body.placement,
            )
    combos = [(t, p, c) for t in body.trace_ids for p in body.policies for c in body.clusters]
    _check_quota(session, user, settings, len(combos))
    sweep = Sweep(tenant=user.tenant, user_id=user.id)
    session.add(sweep)
    session.flush()
    rows = [_row(user, t, p, c, body) for t, p, c in combos]
    for r in rows:
        r.sweep_id = sweep.id
    session.add_all(rows)
    session.flush()
    answer = _sweep_public(sweep, rows)
    first = once.commit(session, answer)
    if first is not None:
        return SweepPublic.model_validate(first)
    _queue(request, settings, session, rows, sweep, once)
    return answer


def _sweep_public(sweep: Sweep, rows: list[Replay]) -> SweepPublic:
    states = {r.status for r in rows}
    state = next((s for s in ("failed", "running", "queued") if s in states), "succeeded")
    if state == "queued" and "succeeded" in states:
        state = "running"
    progress = sum(r.progress for r in rows) / len(rows) if rows else 1.0
    return SweepPublic(
        id=sweep.id, status=state, progress=progress, replays=[public(r) for r in rows]
    )


@router.get("/sweeps/{sweep_id:int}", response_model=SweepPublic, responses={404: {}})
def get_sweep(sweep_id: int, session: SessionDep, user: CurrentUser) -> SweepPublic:
    sweep = session.get(Sweep, sweep_id) if 0 < sweep_id <= INT32_MAX else None
    if sweep is None or not can_see(user, sweep.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"sweep {sweep_id} not found")
    rows = session.scalars(select(Replay).where(Replay.sweep_id == sweep.id).order_by(Replay.id))
    return _sweep_public(sweep, list(rows))


@router.get("", response_model=ReplaysPublic)
def list_replays(
    session: SessionDep,
    user: CurrentUser,
    skip: Annotated[Skip, Query()] = 0,
    limit: Annotated[Limit, Query()] = 100,
) -> ReplaysPublic:
    query = select(Replay)
    if user.role != "admin":
        query = query.where(Replay.tenant == user.tenant)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Replay.id.desc()).offset(skip).limit(limit))
    return ReplaysPublic(data=[public(r) for r in rows], count=count)


def visible_replay(session: Session, user: User, replay_id: int) -> Replay:
    row = session.get(Replay, replay_id) if 0 < replay_id <= INT32_MAX else None
    if row is None or not can_see(user, row.tenant):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"replay {replay_id} not found")
    return row


@router.get("/{replay_id:int}", response_model=ReplayPublic, responses=NOT_FOUND)
def get_replay(replay_id: int, session: SessionDep, user: CurrentUser) -> ReplayPublic:
    """Status and progress (0..1) of a replay."""
    return public(visible_replay(session, user, replay_id))


@router.get("/{replay_id:int}/results", response_model=ReplayResults, responses=NOT_FOUND)
def replay_results(replay_id: int, session: SessionDep, user: CurrentUser) -> ReplayResults:
    """The headline figures and the full summary (null until the replay succeeds)."""
    return ReplayResults.model_validate(visible_replay(session, user, replay_id))


@router.get("/{replay_id:int}/plots/{name}", response_class=FileResponse, responses=NOT_FOUND)
def replay_plot(replay_id: int, name: str, session: SessionDep, user: CurrentUser) -> FileResponse:
    """A PNG plot: jct_cdf, utilization or queue."""
    row = visible_replay(session, user, replay_id)
    path = (row.plots or {}).get(name)
    if path is None or not Path(path).is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"replay {replay_id} has no plot {name!r}")
    return FileResponse(path, media_type="image/png")


def _finished_dir(row: Replay) -> Path:
    if row.status != "succeeded" or row.out_dir is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"replay {row.id} has no results ({row.status})"
        )
    return Path(row.out_dir)


@router.get("/{replay_id:int}/series", response_model=ReplaySeries, responses=NOT_FOUND)
def replay_series(replay_id: int, session: SessionDep, user: CurrentUser) -> ReplaySeries:
    """What the dashboard charts: sorted JCTs, the timeline, fairness (404 until it succeeds)."""
    row = visible_replay(session, user, replay_id)
    try:
        return read_series(row.id, row.policy, row.cluster, _finished_dir(row), row.summary or {})
    except SeriesMissing as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None


@router.get("/{replay_id:int}/files/{name}", response_class=FileResponse, responses=NOT_FOUND)
def replay_file(
    replay_id: int, name: DownloadName, session: SessionDep, user: CurrentUser
) -> FileResponse:
    """A stored result file as a download: summary.json, jobs.csv or timeline.csv."""
    path = _finished_dir(visible_replay(session, user, replay_id)) / name
    if not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"replay {replay_id} has no {name}")
    return FileResponse(path, media_type=DOWNLOADS[name], filename=f"replay-{replay_id}-{name}")
