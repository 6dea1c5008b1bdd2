"""Group commit for job submissions: one transaction, one fsync, for many requests.

A durable PostgreSQL commit costs milliseconds (the WAL is flushed to disk); one
commit per submission caps the API at a few hundred per second and queues requests
behind each other. `SubmitWriter` is a thread that takes every submission waiting
in its queue, inserts them all (jobs and their "submitted" events) in one
transaction, commits, hands them to the LiveCluster in one call, and only then
acknowledges each request. While one batch commits, the next one gathers; nothing
waits for a timer. Durability is unchanged: a request is answered 201 only after
its batch's commit returned, and a failed commit fails every request of the batch
(503 for a database that is down), so nothing acknowledged is lost.

A submission with an `Idempotency-Key` brings its claim (an IdempotencyKey row,
api.store.idempotency) and it is inserted in the same transaction as the job: the key and
its job are stored together or not at all. Keys already claimed, in the database or
earlier in the same batch, are not inserted again; their requests get `KeyTaken` once
the batch has committed, and look up the first answer (api.routes.jobs). Once a
minute a batch also deletes the expired keys, in the same transaction.

Used by `api.local_mode.backend.LocalMode` (`accept`), which hands it `LiveCluster.add_jobs`
for the hand-over, and started and stopped with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from api.store.idempotency import KeyTaken, claim_batch, forget_expired_keys
from api.store.models import Job, JobEvent
from controller.model import JobSpec

log = logging.getLogger(__name__)

JOBS = Job.metadata.tables[Job.__tablename__]
EVENTS = JobEvent.metadata.tables[JobEvent.__tablename__]
MAX_BATCH = 500  # rows per transaction; more waiting requests go in the next one
# How often a batch also deletes expired idempotency keys: keys expire after a day,
# so once a minute keeps the table within a minute of a day's keys, at one statement.
FORGET_KEYS_EVERY_S = 60.0


class WriterStopped(RuntimeError):
    """The service is shutting down: the submission was not stored."""


@dataclass(eq=False)
class Submission:
    """One request's job row and "submitted" event, and how to answer it."""

    job: dict[str, Any]  # Job column values
    event: dict[str, Any]  # JobEvent column values
    spec: JobSpec
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[JobSpec] = field(repr=False)
    claim: dict[str, Any] | None = None  # IdempotencyKey column values, if keyed

    def resolve(self, placed: JobSpec | None, exc: BaseException | None) -> None:
        def settle() -> None:
            if self.future.done():  # the client went away; the job stands regardless
                return
            if exc is not None:
                self.future.set_exception(exc)
            elif placed is not None:
                self.future.set_result(placed)

        # RuntimeError: the request's event loop is closed, nobody is left to answer.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(settle)


class SubmitWriter:
    """A thread that commits queued submissions in batches, then hands them over."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        hand_over: Callable[[Sequence[JobSpec]], list[JobSpec]],
        *,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._sessions = sessions
        self._hand_over = hand_over
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Submission | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._keys_forgotten_at = -FORGET_KEYS_EVERY_S  # time.monotonic() of the last purge
        self.batches = 0  # transactions committed (for tests and the benchmark)
        self.committed = 0  # jobs committed

    def start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name="gpuflow-writer", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Refuse new submissions, finish the queued ones, end the thread."""
        with self._lock:
            self._stopped = True
            thread = self._thread
            self._queue.put(None)
        if thread is not None:
            thread.join(timeout=timeout_s)

    async def persist(
        self,
        job: dict[str, Any],
        event: dict[str, Any],
        spec: JobSpec,
        claim: dict[str, Any] | None = None,
    ) -> JobSpec:
        """Queue the job for the next group commit, with its idempotency key's `claim` if
        any; once committed, it is handed over (`hand_over`). Returns it as placed.

        Raises what the commit raised (SQLAlchemy errors), WriterStopped, or KeyTaken.
        """
        loop = asyncio.get_running_loop()
        item = Submission(job, event, spec, loop, loop.create_future(), claim)
        with self._lock:
            if self._stopped:
                raise WriterStopped("the service is shutting down")
            self._start_locked()  # also when the app's lifespan did not run (bare TestClient)
            self._queue.put(item)
        return await item.future

    # -- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            stop = False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._write(batch)
            if stop:
                break
        # Stopped: anything that slipped in after the sentinel is refused, not dropped.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.resolve(None, WriterStopped("the service is shutting down"))

    def _write(self, batch: list[Submission]) -> None:
        try:
            taken = self._commit(batch)
        except (IntegrityError, DataError) as exc:
            if len(batch) == 1:
                batch[0].resolve(None, exc)
                return
            # One bad row must not fail its neighbours: store them one by one.
            log.warning("batch of %d refused (%s); committing one by one", len(batch), exc)
            for item in batch:
                self._write([item])
            return
        except Exception as exc:  # the database is down (or worse): fail the whole batch
            for item in batch:
                item.resolve(None, exc)
            return
        for item in taken:
            item.resolve(None, KeyTaken(item.claim["key"] if item.claim else ""))
        if taken:
            batch = [item for item in batch if item not in taken]
        self.batches += 1
        self.committed += len(batch)
        if not batch:
            return
        try:
            placed = self._hand_over([item.spec for item in batch])
        except Exception as exc:  # committed, so a restart resubmits them
            log.exception("committed jobs could not be handed over")
            for item in batch:
                item.resolve(None, exc)
            return
        for item, spec in zip(batch, placed, strict=True):
            item.resolve(spec, None)

    def _commit(self, batch: list[Submission]) -> set[Submission]:
        """Insert the batch in one transaction; the keyed submissions whose key was
        taken (left out)."""
        # Core inserts (executemany), not the ORM's bulk path: the rows are plain dicts.
        with self._sessions() as session:
            conn = session.connection()
            keyed = [item for item in batch if item.claim is not None]
            if keyed and time.monotonic() - self._keys_forgotten_at >= FORGET_KEYS_EVERY_S:
                forget_expired_keys(conn)
                self._keys_forgotten_at = time.monotonic()
            claimed = claim_batch(conn, [item.claim for item in keyed if item.claim is not None])
            taken = {item for item, new in zip(keyed, claimed, strict=True) if not new}
            stored = [item for item in batch if item not in taken]
            if stored:
                conn.execute(insert(JOBS), [item.job for item in stored])
                conn.execute(insert(EVENTS), [item.event for item in stored])
            session.commit()
        return taken
