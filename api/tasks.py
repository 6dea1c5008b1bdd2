"""Celery: the one app object and the replay task. Worker: `celery -A api.tasks worker`.

A worker reads its configuration from GPUFLOW_* (api.settings.Settings) as it starts;
the API process gets it from `create_app`. Tasks take ids and
store everything in the database, so no result backend is needed. A sweep fans out
as a group of one replay_task per (trace, policy, cluster): a replay is the unit of
work, sized by its trace, and one simulation cannot be split further.

With no broker configured, `dispatch` runs replays in-process on a `ReplayExecutor`,
so the embedded default needs no Redis. Replays a dead runner left behind are
reconciled as the API or a worker starts (`start_replays`, api.replay_reconcile).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from celery import Celery, group
from celery.signals import celeryd_init, worker_ready
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.db import make_engine, make_sessionmaker
from api.replay_reconcile import reconcile_at_start, reconcile_orphans
from api.replay_run import run_stored_replay
from api.settings import Settings

log = logging.getLogger(__name__)

celery_app = Celery("gpuflow")
_worker: dict[str, Any] = {}  # the worker process's settings and sessions, built once


@celeryd_init.connect
def _configure_worker(sender: Any = None, **_: Any) -> None:
    """A worker (`celery -A api.tasks worker`) reads GPUFLOW_* as it starts."""
    configure(celery_app, Settings())


@worker_ready.connect
def _reconcile_on_worker_start(sender: Any = None, **_: Any) -> None:
    """Replays whose worker died (a stale heartbeat) are failed as this one starts."""
    settings, sessions = _worker_sessions()
    try:
        reconcile_orphans(sessions, settings.replay_stale_after_s)
    except SQLAlchemyError as exc:
        log.warning("replays not reconciled, database unavailable: %s", exc)


class ReplayExecutor(ThreadPoolExecutor):
    """The API's in-process replay runner (no broker): one thread, and a flag that ends
    the running replay at shutdown instead of waiting for it to finish."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="replay")
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown(wait=True, cancel_futures=True)


def start_replays(settings: Settings, sessions: sessionmaker[Session], executor: Executor) -> None:
    """As the API starts: in-process, the replays of the process before (interrupted:
    failed; queued: run again); with a broker, those of dead workers."""
    try:
        if settings.broker_url:
            reconcile_orphans(sessions, settings.replay_stale_after_s)
            return
        done = reconcile_at_start(sessions)
    except SQLAlchemyError as exc:  # the periodic check (api.app) comes back to them
        log.warning("replays not reconciled, database unavailable: %s", exc)
        return
    dispatch(settings, sessions, executor, done.requeued)


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
    """Run one stored replay (api.replay_run); returns its final status."""
    settings, sessions = _worker_sessions()
    return run_stored_replay(sessions, settings.data_dir, replay_id)


def dispatch(
    settings: Settings,
    sessions: sessionmaker[Session],
    executor: Executor,
    replay_ids: Sequence[int],
) -> None:
    """Queue replays on the broker, or run them in-process when there is none.

    Raises kombu's OperationalError (or redis' ConnectionError) if the broker is down.
    """
    if settings.broker_url:
        # An explicit connection (not the app's pool) so that the broker of these
        # settings is used and a dead one fails at once instead of being retried.
        with celery_app.connection_for_write(settings.broker_url) as conn:
            conn.ensure_connection(max_retries=1)
            tasks = group(replay_task.si(i) for i in replay_ids)
            tasks.apply_async(producer=conn.Producer(), queue=settings.celery_queue)
        return
    stop = executor.stopping if isinstance(executor, ReplayExecutor) else None
    for replay_id in replay_ids:
        executor.submit(run_stored_replay, sessions, settings.data_dir, replay_id, stop)
