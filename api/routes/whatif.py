"""What if: the live cluster replayed from now under each policy (POST /whatif).

A sync route, so FastAPI runs it in its threadpool: the simulations (CPU work,
bounded by controller.whatif.Limits) never block the event loop. One what-if runs at
a time (api.whatif.forecast.Gate); another asked meanwhile is a 429.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status
from sqlalchemy import select

from api.deps import UNAUTHORIZED_OR_FORBIDDEN, BackendDep, CurrentUser, SessionDep, SettingsDep
from api.field_errors import invalid
from api.routes.policies import active_policy_name
from api.schemas.whatif import WhatIfPublic, WhatIfRequest
from api.store.models import Job
from api.whatif.forecast import Gate, observe, public
from controller.whatif import Limits, WhatIfTooLarge, forecast
from policies.registry import policy_names

router = APIRouter(prefix="/whatif", tags=["whatif"])
BUSY_RETRY_S = 5
GATE = Gate()  # one what-if at a time in this process


@router.post(
    "",
    response_model=WhatIfPublic,
    responses={
        **UNAUTHORIZED_OR_FORBIDDEN,
        413: {"description": "more active jobs than a what-if replays"},
        429: {"description": "another what-if is running"},
    },
)
def what_if(
    request: Request,
    user: CurrentUser,
    backend: BackendDep,
    session: SessionDep,
    settings: SettingsDep,
    body: WhatIfRequest | None = None,
) -> WhatIfPublic:
    """Replay the live cluster (nodes, running and waiting jobs with their progress)
    from now under each policy and predict each job's finish under each. A user sees
    their tenant's jobs; the others take part in the replay, counted, not named."""
    names = _checked(body.policies if body and body.policies else policy_names())
    limits: Limits = getattr(request.app.state, "whatif_limits", None) or Limits()
    with GATE as entered:
        if not entered:
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                "another what-if is running; retry in a few seconds",
                headers={"Retry-After": str(BUSY_RETRY_S)},
            )
        observed = observe(backend, settings, active_policy_name(request))
        try:
            forecasts = forecast(observed.state, names, limits)
        except WhatIfTooLarge as exc:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, str(exc)) from None
    visible = [
        j.spec.job_id
        for j in observed.state.jobs
        if user.role == "admin" or j.spec.tenant == user.tenant
    ]
    rows = session.execute(select(Job.id, Job.name).where(Job.id.in_(visible))).all()
    return public(observed, forecasts, user, {row.id: row.name for row in rows})


def _checked(names: list[str]) -> list[str]:
    """The names in order, once each; a 422 naming `policies[i]` for an unknown one."""
    known = set(policy_names())
    for i, name in enumerate(names):
        if name not in known:
            msg = f"unknown policy {name!r} (known: {', '.join(sorted(known))})"
            raise invalid(("body", "policies", i), msg, name)
    return list(dict.fromkeys(names))
