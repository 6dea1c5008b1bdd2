"""One router per resource; `api_router` gathers them under /api/v1."""

from fastapi import APIRouter

from api.routes import (
    cluster,
    events,
    history,
    jobs,
    policies,
    quota_queues,
    replays,
    traces,
    users,
)

api_router = APIRouter()
api_router.include_router(jobs.router)
api_router.include_router(cluster.router)
api_router.include_router(policies.router)
api_router.include_router(traces.router)
api_router.include_router(replays.router)
api_router.include_router(users.router)
api_router.include_router(quota_queues.router)
api_router.include_router(events.router)
api_router.include_router(history.router)
