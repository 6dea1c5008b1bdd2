"""The API's own replay runner when no broker is configured: child processes.

Created by api.app (`create_app`) and fed by api.tasks.start_next, which sends it
at most settings.replay_concurrency replays at a time. A replay runs in a spawned
child process, not in a thread of the API's: a simulation holds the CPU for seconds
to minutes (building a 100,000-GPU cluster alone takes seconds), and in a thread it
would hold the interpreter's lock against every request the API answers, one
tenant's replay slowing every other tenant's submissions. A child builds its own
database engine from the settings and keeps it for the replays that follow.

`stop` (the API's shutdown) sets a flag that the children check between two
progress reports, so that a running replay ends as failed (api.replays.run) instead
of being waited for. A child whose API process died (kill -9) stops the same way, so
that it does not go on with a replay that the next start has failed already
(api.replays.reconcile). A child that dies (killed, out of memory) leaves its replay
running with a stale heartbeat (failed by api.replays.reconcile) and the pool is
started again for the next ones.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from api.replays.run import run_stored_replay
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker

log = logging.getLogger(__name__)
_child: dict[str, Any] = {}  # in a child process: its settings, sessions and stop flag
ORPHAN_CHECK_S = 1.0  # how often a child looks whether its API is still there


class ReplayExecutor:
    """At most `settings.replay_concurrency` child processes, each running one replay
    at a time."""

    def __init__(self, settings: Settings) -> None:
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded API
        self._settings = settings
        self.stopping = self._context.Event()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self._settings.replay_concurrency,
            mp_context=self._context,
            initializer=_start_child,
            initargs=(self._settings, self.stopping, os.getpid()),
        )

    def submit(self, replay_id: int, then: Callable[[], None]) -> None:
        """Run replay `replay_id` in a child, then call `then` (unless stopping)."""
        try:
            future = self._pool.submit(_run_in_child, replay_id)
        except BrokenProcessPool:  # a child died: the pool refuses work until replaced
            log.warning("a replay process died; replay processes started again")
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            future = self._pool.submit(_run_in_child, replay_id)
        future.add_done_callback(lambda done: self._ended(replay_id, done, then))

    def _ended(self, replay_id: int, done: Future[str], then: Callable[[], None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.warning("replay %s: its process failed: %s", replay_id, done.exception())
        if not self.stopping.is_set():
            then()

    def stop(self) -> None:
        """Running replays end now, as failed; queued ones stay queued in the database."""
        self.stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


class _StopFlag:
    """Set when the API shuts down or its process is gone (the child's parent changed)."""

    def __init__(self, stopping: Any, parent_pid: int) -> None:
        self._stopping, self._parent_pid = stopping, parent_pid

    def is_set(self) -> bool:
        return bool(self._stopping.is_set()) or self.orphaned()

    def orphaned(self) -> bool:
        return os.getppid() != self._parent_pid


def _start_child(settings: Settings, stopping: Any, parent_pid: int) -> None:
    _child["settings"] = settings
    _child["sessions"] = make_sessionmaker(make_engine(settings))
    _child["stop"] = stop = _StopFlag(stopping, parent_pid)
    _child["running"] = threading.Lock()
    threading.Thread(target=_exit_when_orphaned, args=(stop,), daemon=True).start()


def _exit_when_orphaned(stop: _StopFlag) -> None:
    """An idle child waits on the pool's queue, whose pipe it holds both ends of, so
    its API's death alone does not end it: once the API is gone and no replay runs
    here (a running one ends at its next progress report, as failed), exit."""
    while True:
        time.sleep(ORPHAN_CHECK_S)
        if stop.orphaned() and _child["running"].acquire(blocking=False):
            os._exit(0)


def _run_in_child(replay_id: int) -> str:
    settings: Settings = _child["settings"]
    with _child["running"]:
        return run_stored_replay(_child["sessions"], settings.data_dir, replay_id, _child["stop"])
