"""The live cluster's history over a window (GET /api/v1/history/...): the cluster's
GPUs, utilisation, memory and queue; each node's; one node's GPUs with their health;
each tenant's GPUs and queue. For the dashboard's History page.

The samples are api.samples' (taken every settings.history_sample_s, in both modes);
the window is `from_s`..`to_s` or the `last_s` seconds to now, on the backend's clock,
binned by `step_s` (api/samples/series.py). Utilisation and allocation carry no job:
every user sees the cluster's and the nodes'; a tenant's figures are seen by its users
and the admins (api.deps.visible_to). Each quota's GPUs against its guarantee over
time are GET /queues/series's (api/quotas/series.py, from the jobs' events).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from sqlalchemy import Select, func, select

from api.deps import BackendDep, CurrentUser, SessionDep, visible_to
from api.field_errors import invalid
from api.samples.series import (
    Window,
    WindowError,
    binned,
    binned_columns,
    rounded,
    sampled_span,
    window_of,
)
from api.schemas.common import Name
from api.schemas.history import (
    ClusterHistoryPublic,
    GpuHistoryRow,
    GpusHistoryPublic,
    HistoryWindow,
    NodeHistoryRow,
    NodesHistoryPublic,
    Series,
    TenantHistoryRow,
    TenantsHistoryPublic,
)
from api.settings import Settings
from api.store.models import ClusterSample, NodeSample, TenantSample

router = APIRouter(prefix="/history", tags=["history"])
# Times as the backend's clock has them: Unix seconds in cluster mode, up to ~1e12
# leaves room for any simulated clock.
TIME_BOUND_S = 1e12
WINDOW_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"description": "a window or step refused, the field named (loc)"},
    503: {"description": "no cluster backend running"},
}


def history_window(
    request: Request,
    backend: BackendDep,
    from_s: Annotated[
        float | None,
        Query(ge=-TIME_BOUND_S, le=TIME_BOUND_S, allow_inf_nan=False, description="start"),
    ] = None,
    to_s: Annotated[
        float | None,
        Query(
            ge=-TIME_BOUND_S, le=TIME_BOUND_S, allow_inf_nan=False, description="end; now if none"
        ),
    ] = None,
    last_s: Annotated[
        float | None,
        Query(gt=0, le=366 * 86400, description="the last seconds to to_s (not with from_s)"),
    ] = None,
    step_s: Annotated[
        float | None,
        Query(gt=0, le=366 * 86400, description="bin width; default: the window in 240 bins"),
    ] = None,
) -> Window:
    settings: Settings = request.app.state.settings
    try:
        return window_of(backend.now_s(), settings.history_sample_s, from_s, to_s, last_s, step_s)
    except WindowError as exc:
        raise invalid(("query", exc.field), str(exc), exc.value) from None


WindowDep = Annotated[Window, Depends(history_window)]


@router.get("/cluster", response_model=ClusterHistoryPublic, responses=WINDOW_RESPONSES)
def cluster_history(
    request: Request, window: WindowDep, session: SessionDep, user: CurrentUser
) -> ClusterHistoryPublic:
    """The cluster's GPUs allocated, their utilisation and memory, unhealthy GPUs, jobs
    running and waiting and the waits, over the window."""
    rows = _rows(session, request, select(ClusterSample.__table__), ClusterSample, window)
    worst = {"wait_max_s"}
    fields = [f for f in ClusterHistoryPublic.model_fields if f not in HistoryWindow.model_fields]
    series = {name: _series(window, rows, name, name in worst) for name in fields}
    return ClusterHistoryPublic.model_validate({**_frame(request, window), **series})


@router.get("/nodes", response_model=NodesHistoryPublic, responses=WINDOW_RESPONSES)
def nodes_history(
    request: Request,
    window: WindowDep,
    session: SessionDep,
    user: CurrentUser,
    node: Annotated[list[Name] | None, Query(description="these nodes only (repeat)")] = None,
) -> NodesHistoryPublic:
    """Each node's GPUs allocated, utilisation and GPU memory used over the window."""
    query = select(NodeSample.t_s, NodeSample.step_s, NodeSample.node, NodeSample.gpus_allocated,
                   NodeSample.util, NodeSample.mem_used_mib)  # fmt: skip
    if node:
        query = query.where(NodeSample.node.in_(node))
    by_node: dict[str, list[Any]] = defaultdict(list)
    for r in _rows(session, request, query, NodeSample, window):
        by_node[r.node].append(r)
    data = []
    for name, rows in sorted(by_node.items()):
        points = ((r.t_s, r.step_s, (r.gpus_allocated, r.util, r.mem_used_mib)) for r in rows)
        allocated, util, mem = (rounded(v) for v in binned_columns(window, points, 3))
        row = NodeHistoryRow(node=name, gpus_allocated=allocated, util=util, mem_used_mib=mem)
        data.append(row)
    return NodesHistoryPublic(**_frame(request, window), data=data, count=len(data))


@router.get(
    "/nodes/{name}/gpus",
    response_model=GpusHistoryPublic,
    responses={**WINDOW_RESPONSES, 404: {"description": "no samples of that node"}},
)
def gpus_history(
    name: str, request: Request, window: WindowDep, session: SessionDep, user: CurrentUser
) -> GpusHistoryPublic:
    """One node's GPUs over the window: utilisation, the part allocated, memory used,
    temperature, power, uncorrected ECC errors and health."""
    query = select(NodeSample.__table__).where(NodeSample.node == name)
    rows = _rows(session, request, query, NodeSample, window)
    if not rows and not _sampled_now(session, name):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no samples of node {name!r}")
    count = max((len(r.gpus.get("util") or ()) for r in rows), default=0)
    totals = [r.gpus.get("mem_total") for r in rows if r.gpus.get("mem_total") is not None]
    scale = {"util": 0.01, "alloc": 0.01, "mem": 1.0, "temp": 1.0, "power": 1.0, "ecc": 1.0,
             "healthy": 1.0}  # fmt: skip
    worst = {"ecc"}

    def series(field: str, index: int) -> list[float | None]:
        points = ((r.t_s, r.step_s, _at(r.gpus.get(field), index, scale[field])) for r in rows)
        if field == "healthy":  # unhealthy over a bin if at any sample in it
            return [None if v is None else float(v >= 1.0) for v in binned(window, points)]
        return rounded(binned(window, points, field in worst))

    gpus = [
        GpuHistoryRow(
            index=i,
            util=series("util", i),
            allocated=series("alloc", i),
            mem_used_mib=series("mem", i),
            temperature_c=series("temp", i),
            power_w=series("power", i),
            ecc_errors=series("ecc", i),
            healthy=series("healthy", i),
        )
        for i in range(count)
    ]
    return GpusHistoryPublic(
        **_frame(request, window),
        node=name,
        mem_total_mib=max(totals) if totals else None,
        gpus=gpus,
    )


@router.get(
    "/tenants",
    response_model=TenantsHistoryPublic,
    responses={**WINDOW_RESPONSES, 403: {"description": "a user naming another tenant"}},
)
def tenants_history(
    request: Request,
    window: WindowDep,
    session: SessionDep,
    user: CurrentUser,
    tenant: Annotated[Name | None, Query(description="admins: any; users: their own")] = None,
) -> TenantsHistoryPublic:
    """Each tenant's GPUs held, jobs running and waiting and its longest wait over the
    window: a user's own tenant, an admin's every tenant (or `tenant`)."""
    query = visible_to(select(TenantSample.__table__), user, tenant, TenantSample.tenant)
    by_tenant: dict[str, list[Any]] = defaultdict(list)
    for r in _rows(session, request, query, TenantSample, window):
        by_tenant[r.tenant].append(r)
    # A tenant has no row in a sample where it had no job: zero, over the time sampled.
    times = select(ClusterSample.t_s, ClusterSample.step_s)
    sampled = sampled_span(window, _rows(session, request, times, ClusterSample, window))
    data = [
        TenantHistoryRow(
            tenant=name,
            gpus=_series(window, rows, "gpus", sampled=sampled),
            running=_series(window, rows, "running", sampled=sampled),
            waiting=_series(window, rows, "waiting", sampled=sampled),
            wait_max_s=_series(window, rows, "wait_max_s", worst=True),
        )
        for name, rows in sorted(by_tenant.items())
    ]
    return TenantsHistoryPublic(**_frame(request, window), data=data, count=len(data))


def _rows(
    session: SessionDep,
    request: Request,
    query: Select[*tuple[Any, ...]],
    model: Any,
    window: Window,
) -> Sequence[Any]:
    """The rows of `query` whose span meets the window (a row stands for at most the
    longer of the sampling period and the compaction's bin)."""
    settings: Settings = request.app.state.settings
    longest = max(settings.history_sample_s, settings.history_coarse_s)
    inside = query.where(model.t_s > window.from_s - longest, model.t_s < window.to_s)
    return session.execute(inside.order_by(model.t_s)).all()


def _series(
    window: Window,
    rows: Sequence[Any],
    field: str,
    worst: bool = False,
    sampled: Sequence[float] | None = None,
) -> Series:
    """Column `field` of the rows on the window's bins (api.samples.series.binned)."""
    points = ((r.t_s, r.step_s, getattr(r, field)) for r in rows)
    return rounded(binned(window, points, worst, sampled))


def _frame(request: Request, window: Window) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    backend = request.app.state.backend
    return {
        "clock": "wall" if backend.mode == "cluster" else "simulated",
        "from_s": window.from_s,
        "to_s": window.to_s,
        "step_s": window.step_s,
        "sample_s": settings.history_sample_s,
        "t_s": window.starts(),
    }


def _at(values: list[int | None] | None, index: int, scale: float) -> float | None:
    if not values or index >= len(values):
        return None
    value = values[index]
    return None if value is None else float(value) * scale


def _sampled_now(session: SessionDep, name: str) -> bool:
    """Whether the newest sample has the node (a node known, sampled before the window)."""
    newest = select(func.max(NodeSample.t_s)).scalar_subquery()
    found = session.scalar(
        select(NodeSample.node).where(NodeSample.t_s == newest, NodeSample.node == name)
    )
    return found is not None
