"""The FastAPI app factory: `create_app(settings)`. Nothing is built at import time.

Called by `gpuflow serve` (through uvicorn), the tests and bench/api.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from api import dashboard, openapi_responses
from api.backend_factory import make_backend
from api.backends import JobBackend
from api.deps import UNAUTHORIZED_OR_FORBIDDEN, MetricsReader
from api.http import errors
from api.http.guard import RequestGuard
from api.http.observability import LiveCollector, Metrics, MetricsMiddleware
from api.http.query_guard import refuse_unknown_query
from api.http.security import TokenCache
from api.local_mode.backend import LocalMode
from api.nodes_answers import NodesAnswers
from api.replays.executor import ReplayExecutor
from api.replays.trace_check import TraceChecker
from api.routes import api_router, order, timeline, whatif
from api.routes.traces import MAX_TRACE_BYTES
from api.samples.sampler import Sampler, sampler_for
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.tasks import celery_app, configure, reconcile, start_replays

API_PREFIX = "/api/v1"
log = logging.getLogger(__name__)
DESCRIPTION = """GPU-cluster manager: submit jobs, watch the cluster, switch the scheduling
policy, upload traces and replay them against policies.

Authenticate with `Authorization: Bearer <token>`; the first admin's token comes from
`gpuflow admin create`. Users see and act on their own tenant's objects only."""
MULTIPART_SLACK_BYTES = 2**20  # a trace upload's form fields and part headers


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    engine = make_engine(settings)
    configure(celery_app, settings)
    metrics = Metrics()
    app = FastAPI(
        title="gpuflow",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=_lifespan,
        docs_url=None,  # api.dashboard serves /docs and /redoc from bundled assets
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = make_sessionmaker(engine)
    app.state.tokens = TokenCache(settings.token_cache_s)
    local_mode = settings.live and not settings.cluster_mode
    app.state.local = LocalMode(settings, app.state.sessions) if local_mode else None
    app.state.backend = make_backend(settings, app.state.sessions, app.state.local)
    app.state.nodes_answers = NodesAnswers()  # GET /nodes's bodies, by viewer
    app.state.sampler = sampler_for(app.state.backend, app.state.sessions, settings)
    app.state.executor = ReplayExecutor(settings)
    app.state.trace_checker = TraceChecker(settings.trace_check_concurrency)
    app.state.metrics = metrics
    metrics.registry.register(LiveCollector(lambda: _live(app)))
    app.add_middleware(
        RequestGuard,
        prefix=API_PREFIX,
        max_body_bytes=settings.max_body_bytes,
        larger={f"{API_PREFIX}/traces": MAX_TRACE_BYTES + MULTIPART_SLACK_BYTES},
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts 401s, 413s
    errors.install(app)
    known_query_only = [Depends(refuse_unknown_query)]
    for router in (api_router, whatif.router, order.router, timeline.router):
        app.include_router(router, prefix=API_PREFIX, dependencies=known_query_only)
    _health_routes(app)
    dashboard.install(app)
    openapi_responses.install(app, API_PREFIX)
    return app


def _live(app: FastAPI) -> Any:
    local: LocalMode | None = app.state.local
    return None if local is None else local.live


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    backend: JobBackend | None = app.state.backend
    settings: Settings = app.state.settings
    sampler: Sampler | None = app.state.sampler
    if backend is not None:
        backend.start()
    if sampler is not None:
        sampler.start()
    await run_in_threadpool(start_replays, settings, app.state.sessions, app.state.executor)
    orphans = asyncio.create_task(_reconcile_every(app, settings.replay_reconcile_every_s))
    try:
        yield
    finally:
        orphans.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await orphans
        if sampler is not None:
            sampler.stop()
        if backend is not None:
            backend.stop()
        app.state.executor.stop()  # a running replay ends now, failed as interrupted
        app.state.trace_checker.stop()
        app.state.engine.dispose()


async def _reconcile_every(app: FastAPI, every_s: float) -> None:
    """Replays whose runner died or whose task was lost while the service runs, and
    free slots filled (api.tasks.reconcile), with or without a broker."""
    settings, sessions, executor = app.state.settings, app.state.sessions, app.state.executor
    while True:
        await asyncio.sleep(every_s)
        try:
            await run_in_threadpool(reconcile, settings, sessions, executor)
        except Exception as exc:  # database or broker down: the next check comes back
            log.warning("replays not reconciled: %s", exc)


def _health_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "a dependency is down"}})
    def readyz(request: Request) -> JSONResponse:
        """The database answers and, if configured, the broker does."""
        checks, code = _readiness(request.app.state.settings, request.app.state)
        return JSONResponse(checks, code, headers=errors.RETRY_AFTER if code == 503 else None)

    @app.get(
        "/metrics", tags=["health"], response_class=Response, responses=UNAUTHORIZED_OR_FORBIDDEN
    )
    def prometheus(request: Request, reader: MetricsReader) -> Response:
        """Prometheus text format; a bearer token: an admin's or settings.metrics_token."""
        body = request.app.state.metrics.render()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def _readiness(settings: Settings, state: Any) -> tuple[dict[str, str], int]:
    checks: dict[str, str] = {}
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except errors.DB_DOWN as exc:
        log.warning("readiness: database unavailable: %s", exc)
        checks["database"] = "unavailable"  # no host, port or driver text (api.http.errors)
    if settings.broker_url:
        try:
            with celery_app.connection_for_write(settings.broker_url) as conn:
                conn.ensure_connection(max_retries=1)
            checks["broker"] = "ok"
        except errors.BROKER_DOWN as exc:
            log.warning("readiness: broker unavailable: %s", exc)
            checks["broker"] = "unavailable"
    else:
        checks["broker"] = "none: replays run in-process"
    ok = all(v == "ok" or v.startswith("none") for v in checks.values())
    return checks, 200 if ok else 503
