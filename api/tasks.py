"""Celery: the one app object and the replay task. Worker: `celery -A api.tasks worker`.

A worker reads its configuration from GPUFLOW_* (api.settings.Settings) as it starts;
the API process gets it from `create_app`. Tasks take ids and store everything in
the database, so no result backend is needed. A sweep is one replay_task per (trace,
policy, cluster): a replay is the unit of work, sized by its trace, and one
simulation cannot be split further.

Replays wait in the database; `start_next` sends those that free slots go to
(api.replays.dispatch, fair across tenants) to the broker or, with no broker
configured, to the API's own replay processes (api.replays.executor), so the
embedded default needs no Redis. A replay that ends hands its slot on (`start_next`
again). Replays a dead runner or a lost task left behind are reconciled as the API
or a worker starts and then periodically (`start_replays`, `reconcile`,
api.replays.reconcile).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from celery import Celery, group
from celery.signals import celeryd_init, worker_ready
from sqlalchemy.orm import Session, sessionmaker

from api.replays.dispatch import pump
from api.replays.executor import ReplayExecutor
from api.replays.reconcile import reconcile_at_start, reconcile_lost, reconcile_orphans
from api.replays.run import run_stored_replay
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker

log = logging.getLogger(__name__)

celery_app = Celery("gpuflow")
_worker: dict[str, Any] = {}  # the worker process's settings and sessions, built once


@celeryd_init.connect
def _configure_worker(sender: Any = None, **_: Any) -> None:
    """A worker (`celery -A api.tasks worker`) reads GPUFLOW_* as it starts."""
    configure(celery_app, Settings())


@worker_ready.connect
def _reconcile_on_worker_start(sender: Any = None, **_: Any) -> None:
    """As this worker starts: replays whose worker died (a stale heartbeat) failed, lost
    tasks sent again, and the free slots (this worker's among them) filled."""
    settings, sessions = _worker_sessions()
    try:
        reconcile(settings, sessions, None)
    except Exception as exc:  # database or broker down: the API's periodic check follows
        log.warning("replays not reconciled: %s", exc)


def start_replays(
    settings: Settings, sessions: sessionmaker[Session], executor: ReplayExecutor
) -> None:
    """As the API starts: in-process, the replays of the process before (interrupted:
    failed; queued: sent again); with a broker, those of dead workers and lost tasks."""
    try:
        if not settings.broker_url:
            reconcile_at_start(sessions)
        reconcile(settings, sessions, executor)
    except Exception as exc:  # database or broker down: the periodic check (api.app) follows
        log.warning("replays not reconciled: %s", exc)


def reconcile(
    settings: Settings, sessions: sessionmaker[Session], executor: ReplayExecutor | None
) -> None:
    """Every settings.replay_reconcile_every_s (api.app): replays whose runner died or
    whose task was lost (api.replays.reconcile), then the free slots filled."""
    reconcile_orphans(sessions, settings.replay_stale_after_s)
    reconcile_lost(sessions, settings.replay_start_timeout_s, settings.replay_max_dispatches)
    start_next(settings, sessions, executor)


def start_next(
    settings: Settings, sessions: sessionmaker[Session], executor: ReplayExecutor | None
) -> list[int]:
    """Send the replays that free slots go to (api.replays.dispatch) to the broker, or to
    `executor` when there is none; their ids.

    Raises kombu's OperationalError (or redis' ConnectionError) if the broker is down."""
    if settings.broker_url:
        return pump(sessions, settings.replay_concurrency, partial(_send, settings))
    if executor is None or executor.stopping.is_set():
        return []
    return pump(sessions, settings.replay_concurrency, partial(_run, settings, sessions, executor))


def check_broker(settings: Settings) -> None:
    """Raise as `start_next` would if the broker is down (nothing sent)."""
    _send(settings, [])


def _send(settings: Settings, replay_ids: list[int]) -> None:
    # An explicit connection (not the app's pool) so that the broker of these settings
    # is used and a dead one fails at once instead of being retried.
    with celery_app.connection_for_write(settings.broker_url) as conn:
        conn.ensure_connection(max_retries=1)
        if replay_ids:
            tasks = group(replay_task.si(i) for i in replay_ids)
            tasks.apply_async(producer=conn.Producer(), queue=settings.celery_queue)


def _run(
    settings: Settings,
    sessions: sessionmaker[Session],
    executor: ReplayExecutor,
    replay_ids: list[int],
) -> None:
    for replay_id in replay_ids:  # each, as it ends, hands its slot on
        executor.submit(replay_id, partial(_hand_on, settings, sessions, executor))


def _hand_on(
    settings: Settings, sessions: sessionmaker[Session], executor: ReplayExecutor | None
) -> None:
    """A replay ended: the next fills its slot now (not at the next reconcile)."""
    try:
        start_next(settings, sessions, executor)
    except Exception as exc:  # the periodic reconcile (api.app) comes back to them
        log.warning("next replays not started: %s", exc)


def configure(app: Celery, settings: Settings) -> None:
    transport: dict[str, Any] = {"socket_connect_timeout": 2, "socket_timeout": 5}
    if settings.broker_key_prefix:
        transport["global_keyprefix"] = settings.broker_key_prefix
    app.conf.update(
        broker_url=settings.broker_url,
        task_default_queue=settings.celery_queue,
        task_ignore_result=True,
        # Fail fast when Redis is down: the API answers 503 and drops the replay row.
        task_publish_retry=False,
        broker_connection_timeout=2,
        broker_transport_options=transport,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )


def _worker_sessions() -> tuple[Settings, sessionmaker[Session]]:
    if "sessions" not in _worker:
        settings = Settings()
        _worker["settings"] = settings
        _worker["sessions"] = make_sessionmaker(make_engine(settings))
    return _worker["settings"], _worker["sessions"]


@celery_app.task(name="gpuflow.replay_task")
def replay_task(replay_id: int) -> str:
    """Run one stored replay (api.replays.run), then send the next; its final status."""
    settings, sessions = _worker_sessions()
    status = run_stored_replay(sessions, settings.data_dir, replay_id)
    _hand_on(settings, sessions, None)
    return status
