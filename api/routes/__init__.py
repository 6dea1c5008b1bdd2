"""One router per resource; `api_router` gathers them under /api/v1.

The quota tree is at /quotas; /queues, its old name, is the same router kept as a
deprecated alias for one release (docs/api.md, "Names").
"""

from fastapi import APIRouter

from api.routes import (
    cluster,
    events,
    history,
    job_logs,
    jobs,
    policies,
    quotas,
    replays,
    traces,
    users,
)

api_router = APIRouter()
api_router.include_router(jobs.router)
api_router.include_router(job_logs.router)
api_router.include_router(cluster.router)
api_router.include_router(policies.router)
api_router.include_router(traces.router)
api_router.include_router(replays.router)
api_router.include_router(users.router)
api_router.include_router(quotas.router, prefix="/quotas")
api_router.include_router(quotas.router, prefix="/queues", deprecated=True)
api_router.include_router(events.router)
api_router.include_router(history.router)
