"""Cluster mode: reporting jobs' summaries written into their DLJobs' `status.train`.

`report_metrics` (api/routes/jobs.py) commits a job's report rows, then calls
`TrainStatusWriter.reported(job_id)` through the ClusterModeBackend (api.cluster_mode.backend) and
answers; this writer's thread does the rest, off the request path. Each job is
written at most once per `interval_s` (GPUFLOW_TRAIN_SUMMARY_INTERVAL_S): the first
report of a quiet job is written at once, later ones wait for the interval to pass
since the last write, and the last report of a burst always lands (a trailing
write, which reads the rows as they are by then). A write reads the job's latest
rows (`latest_samples`: a bounded query per metric name), summarises them
(api.jobs.train_summary) and replaces `status.train` through the status subresource with
the DLJob's resourceVersion (`KubeApi.update_status`: on 409 read afresh and set
again), so the operator's fields are never overwritten. A write that fails is
logged and dropped: the job's next report writes again. Each API replica throttles
its own reports.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.jobs.train_summary import NAMES, ROWS_PER_NAME, Sample, summarise
from api.store.models import Job, JobMetric
from operators.kube import (
    API_ERRORS,
    NOT_FOUND,
    ApiException,
    KubeApi,
    Obj,
    error_message,
    status_code,
)

log = logging.getLogger(__name__)

CachedDLJob = Callable[[str, str], Obj | None]  # (namespace, name) -> the informer's copy


def latest_samples(session: Session, job_id: str) -> list[Sample]:
    """The job's latest ROWS_PER_NAME report rows of each summarised name."""
    out: list[Sample] = []
    for name in NAMES:
        query = (
            select(JobMetric)
            .where(JobMetric.job_id == job_id, JobMetric.name == name)
            .order_by(JobMetric.id.desc())
            .limit(ROWS_PER_NAME)
        )
        for row in session.scalars(query):
            at = row.at if row.at.tzinfo else row.at.replace(tzinfo=UTC)  # SQLite: naive UTC
            out.append(Sample(row.id, row.name, row.value, row.step, at.timestamp()))
    return out


def train_mutator(summary: dict[str, Any], uid: str) -> Callable[[Obj], Obj | None]:
    """Set status.train of the DLJob with this uid (None: another DLJob of the same
    name, or nothing to change); every other status field as read."""

    def mutate(obj: Obj) -> Obj | None:
        old = obj.get("status") or {}
        if obj["metadata"].get("uid") != uid or old.get("train") == summary:
            return None
        new = copy.copy(obj)
        new["status"] = {**old, "train": summary}
        return new

    return mutate


class TrainStatusWriter:
    """The throttle and the thread that writes status.train (see the module doc)."""

    def __init__(
        self,
        api: KubeApi,
        sessions: sessionmaker[Session],
        interval_s: float,
        cached: CachedDLJob = lambda namespace, name: None,
    ) -> None:
        self.api = api
        self._sessions = sessions
        self.interval_s = interval_s
        self._cached = cached
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # job -> when it may be written (monotonic)
        self._last: dict[str, float] = {}  # job -> when it was last written
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.writes = 0  # status writes made (tests, metrics)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpuflow-train-status", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop; a trailing write not yet due is dropped (the next report writes)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def reported(self, job_id: str) -> None:
        """A report of the job was committed: write its summary when allowed."""
        with self._cond:
            if job_id not in self._due:
                last = self._last.get(job_id)
                now = time.monotonic()
                self._due[job_id] = now if last is None else max(now, last + self.interval_s)
                self._cond.notify()

    def _take_due(self) -> list[str] | None:
        """Wait for jobs whose write is due and take them (None: stopping)."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                due = [j for j, t in self._due.items() if t <= now]
                if due:
                    for j in due:
                        del self._due[j]
                        self._last[j] = now  # reports from now on wait for the interval
                    # Jobs quiet for an interval need no memory: their next report is
                    # written at once either way.
                    horizon = now - self.interval_s
                    self._last = {j: t for j, t in self._last.items() if t > horizon}
                    return due
                wait_s = min(self._due.values(), default=now + 3600.0) - now
                self._cond.wait(wait_s)
            return None

    def _run(self) -> None:
        while (due := self._take_due()) is not None:
            for job_id in due:
                try:
                    self.write(job_id)
                except (SQLAlchemyError, *API_ERRORS) as exc:
                    log.warning(
                        "status.train of job %s not written: %s", job_id, error_message(exc)
                    )
                except Exception:  # a bug: its traceback is wanted; the thread lives on
                    log.exception("status.train of job %s not written", job_id)

    def write(self, job_id: str) -> None:
        """Summarise the job's reports into its DLJob's status.train, now."""
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or not (job.dljob_namespace and job.dljob_name and job.dljob_uid):
                return  # no DLJob (yet): nothing to write into
            namespace, name, uid = job.dljob_namespace, job.dljob_name, job.dljob_uid
            summary = summarise(latest_samples(session, job_id))
        if not summary:
            return
        # The informer's copy saves a read; if it is stale, the write's 409 reads afresh.
        obj = self._cached(namespace, name)
        if obj is None:
            try:
                obj = self.api.get_dljob(namespace, name)
            except ApiException as exc:
                if status_code(exc) == NOT_FOUND:
                    return
                raise
        if self.api.update_status(obj, train_mutator(summary, uid)) is not None:
            self.writes += 1
