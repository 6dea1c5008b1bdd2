"""Celery: the one app object and the replay task. Worker: `celery -A api.tasks worker`.

A worker reads its configuration from GPUFLOW_* (api.settings.Settings) as it starts;
the API process gets it from `create_app`. Tasks take ids and
store everything in the database, so no result backend is needed. A sweep fans out
as a group of one replay_task per (trace, policy, cluster): a replay is the unit of
work, sized by its trace, and one simulation cannot be split further.

With no broker configured, `dispatch` runs replays in-process on a thread pool, so
the embedded default needs no Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from celery import Celery, group
from celery.signals import celeryd_init
from sqlalchemy.orm import Session, sessionmaker

from api.db import make_engine, make_sessionmaker
from api.replay_run import run_stored_replay
from api.settings import Settings

celery_app = Celery("gpuflow")
_worker: dict[str, Any] = {}  # the worker process's settings and sessions, built once


@celeryd_init.connect
def _configure_worker(sender: Any = None, **_: Any) -> None:
    """A worker (`celery -A api.tasks worker`) reads GPUFLOW_* as it starts."""
    configure(celery_app, Settings())


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
    for replay_id in replay_ids:
        executor.submit(run_stored_replay, sessions, settings.data_dir, replay_id)
