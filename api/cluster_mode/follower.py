"""Cluster mode's follower: every DLJob's history, written into the job database.

`Follower` records every DLJob's history, REST-submitted or made with kubectl: an
informer (operators.kube.informer: list, then watch, relist on 410 Gone) over DLJobs in
all namespaces hands each new version to a writer thread, which diffs it against
what the job's row recorded (api.cluster_mode.history) and writes the events and the row
in one transaction, the row locked (SELECT ... FOR UPDATE on PostgreSQL). A DLJob
seen for the first time without a row of ours gets one (api.cluster_mode.adoption). Exactly
once:

- a version not newer than the row's `dljob_version` is skipped, so the relist
  after a 410 or a restart of the service adds nothing for what was recorded;
- a newer one is diffed against the row's `dljob_state` (phase, restarts, each
  condition's status and lastTransitionTime), stored in the same transaction as its
  events, so a write either happened with its events or not at all;
- after each (re)list, rows whose DLJob is gone (deleted while the service was
  down, or during a watch gap) are closed as Cancelled, once (terminal rows are
  never written again);
- a DLJob still there whose row is Cancelled is handed to the reaper, once the batch
  is committed, so a cancel whose delete failed or never ran ends with the DLJob gone.

Made and started by cluster mode's backend (api.cluster_mode.backend.ClusterModeBackend), which also
reads its Node and DLJob informer caches.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.cluster_mode.adoption import adopt, epoch_s
from api.cluster_mode.history import record
from api.cluster_mode.reaper import DLJobRef, Reaper
from api.store.job_close import close, rowcount
from api.store.models import TERMINAL_STATUSES, Job, JobEvent
from controller.model.events import EventKind
from operators.dljobs.resources import JOB_DB_ID, LABEL_JOB_ID, foreign_id
from operators.kube import ApiException, KubeApi, Obj, Resource
from operators.kube.informer import Informer, Key, key_of

log = logging.getLogger(__name__)

BATCH = 500  # DLJob versions per transaction
RETRY_S = 0.5  # after the database refused a batch
CAS_TRIES = 5  # a job row changed by another writer meanwhile is read again
# A row whose DLJob was never created (the service stopped between its commit and
# the create) is failed after this long; younger ones may still be on their way.
ORPHAN_AFTER = timedelta(minutes=2)

Item = tuple[str, Any]  # ("seen", obj) | ("deleted", obj) | ("present", [obj, ...])


class Follower:
    """Records every DLJob's history in the job database (see the module doc)."""

    def __init__(
        self,
        api: KubeApi,
        sessions: sessionmaker[Session],
        *,
        watch_timeout_s: int = 60,
        on_cancelled: Reaper | None = None,
    ) -> None:
        self.api = api
        self._sessions = sessions
        self._reaper = on_cancelled
        self._cancelled: list[DLJobRef] = []  # seen in the batch being written
        self.dljobs = Informer(
            api, Resource("dljobs"), self._on_change, watch_timeout_s=watch_timeout_s
        )
        self.nodes = Informer(api, Resource("nodes"), watch_timeout_s=watch_timeout_s)
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._last: dict[Key, Obj] = {}
        self._relists = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._writer: threading.Thread | None = None
        self.queued = 0  # DLJob versions (and lists) handed to the writer
        self.written = 0  # ... and recorded

    def start(self) -> None:
        for name, target in (("dljobs", self.dljobs.run), ("nodes", self.nodes.run)):
            t = threading.Thread(
                target=target, args=(self._stop,), name=f"gpuflow-follow-{name}", daemon=True
            )
            t.start()
            self._threads.append(t)
        self._writer = threading.Thread(target=self._write_loop, name="gpuflow-follow", daemon=True)
        self._writer.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop watching; what was queued is written first."""
        self._stop.set()
        self._queue.put(None)
        if self._writer is not None:
            self._writer.join(timeout=timeout_s)
        for t in self._threads:  # a watch ends at its next event or bookmark
            t.join(timeout=2.0)

    # -- the informer's side: which objects changed -----------------------------------

    def _on_change(self) -> None:
        """Called in the informer's thread after each event (and each relist), before
        the next: the cache then holds exactly that version, so none is skipped."""
        if self._stop.is_set():
            return
        items = self.dljobs.items()
        current = {key_of(o): o for o in items}
        for k, obj in current.items():
            old = self._last.get(k)
            if old is None or _rv(old) != _rv(obj):
                self._put(("seen", obj))
        for k, obj in self._last.items():
            if k not in current:
                self._put(("deleted", obj))
        self._last = current
        relists = self.dljobs.relists
        if relists != self._relists:
            self._put(("present", items))
            self._relists = relists

    def _put(self, item: Item) -> None:
        self.queued += 1
        self._queue.put(item)

    def caught_up(self) -> bool:
        """Listed, and everything seen so far is in the database."""
        return self._relists > 0 and self.written == self.queued

    # -- the writer's side: the database ---------------------------------------------------

    def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                stopping = True
                batch: list[Item] = []
            else:
                batch = [first]
            while len(batch) < BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    continue
                batch.append(item)
            while batch:
                try:
                    self._write(batch)
                    batch = []
                except SQLAlchemyError as exc:
                    # Nothing of the batch was committed: written again, it adds the same.
                    log.warning("job database unavailable, retrying: %s", exc)
                    if self._stop.wait(RETRY_S) and stopping:
                        return
                except Exception:
                    log.exception("DLJob history: a batch failed; it is retried")
                    if self._stop.wait(RETRY_S) and stopping:
                        return

    def _write(self, batch: list[Item]) -> None:
        self._cancelled = []
        with self._sessions() as session:
            for kind, payload in batch:
                if kind == "seen":
                    self._seen(session, payload)
                elif kind == "deleted":
                    self._deleted(session, payload)
                else:
                    self._present(session, payload)
            session.commit()
        if self._reaper is not None and self._cancelled:
            self._reaper.request(self._cancelled)
        self.written += len(batch)

    def _row(self, session: Session, obj: Obj) -> Job | None:
        """The job row of a DLJob: the one its job-id label names if that row is this
        DLJob's (so a copied label cannot write into another job), else the row made
        for it on first sight."""
        meta = obj["metadata"]
        label = (meta.get("labels") or {}).get(LABEL_JOB_ID)
        if label and JOB_DB_ID.fullmatch(label):
            row = session.get(Job, label, with_for_update=True)
            if (
                row is not None
                and row.dljob_name == meta["name"]
                and row.dljob_namespace == meta.get("namespace")
                and row.dljob_uid in (None, meta["uid"])
            ):
                return row
        return session.get(Job, foreign_id(meta["uid"]), with_for_update=True)

    def _seen(self, session: Session, obj: Obj) -> None:
        for _ in range(CAS_TRIES):
            row = self._row(session, obj) or adopt(self.api, session, obj)
            if row.status in TERMINAL_STATUSES:
                if row.status == "Cancelled" and not obj["metadata"].get("deletionTimestamp"):
                    self._cancelled.append(DLJobRef.of_obj(obj))
                return
            rv = _rv(obj)
            seen = row.dljob_version
            if seen is not None and not _newer(rv, seen):
                return  # recorded already (a relist, a restart of the service)
            change = record(row.dljob_state, obj)
            values = {
                **change.values,
                "dljob_uid": obj["metadata"]["uid"],
                "dljob_version": rv,
                "dljob_state": change.state,
            }
            if change.started_s is not None and row.first_start_s is None:
                values["first_start_s"] = change.started_s
            if change.finished_s is not None:
                values["finish_s"] = change.finished_s
            # Compare-and-set on the version recorded: of two writers (a cancel, another
            # replica's follower) only one records a version; the other reads again.
            same = Job.dljob_version.is_(None) if seen is None else Job.dljob_version == seen
            result = session.execute(
                update(Job)
                .where(Job.id == row.id, Job.status.not_in(TERMINAL_STATUSES), same)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            session.expire(row)
            if rowcount(result) == 1:
                session.add_all(
                    JobEvent(
                        job_id=row.id,
                        kind=e.kind,
                        sim_s=e.sim_s,
                        detail=e.detail,
                        by_jobs=list(e.by_jobs) or None,
                        allocation=e.allocation,
                    )
                    for e in change.events
                )
                session.flush()
                return
        raise RuntimeError(f"job of DLJob {obj['metadata']['name']}: kept changing")

    def _deleted(self, session: Session, obj: Obj) -> None:
        row = self._row(session, obj)
        if row is None or row.status in TERMINAL_STATUSES:
            return
        when = obj["metadata"].get("deletionTimestamp")
        at_s = epoch_s(when) if when else time.time()
        close(session, row.id, "Cancelled", EventKind.CANCELLED, at_s, "DLJob deleted")
        session.expire(row)

    def _present(self, session: Session, items: list[Obj]) -> None:
        """After a (re)list: close the rows whose DLJob is gone for good."""
        uids = {o["metadata"]["uid"] for o in items}
        names = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in items}
        query = select(Job).where(Job.dljob_name.is_not(None), Job.status.not_in(TERMINAL_STATUSES))
        for row in session.scalars(query.with_for_update()).all():
            present = (
                row.dljob_uid in uids
                if row.dljob_uid is not None
                else (row.dljob_namespace, row.dljob_name) in names
            )
            if present or self._still_there(row):
                continue
            if row.dljob_uid is None:
                created = row.created_at.replace(tzinfo=row.created_at.tzinfo or UTC)
                if datetime.now(UTC) - created < ORPHAN_AFTER:
                    continue  # its submission may still be creating it
                detail = "its DLJob was never created (the service stopped)"
                close(session, row.id, "Failed", EventKind.FAILED, time.time(), detail)
            else:
                close(
                    session, row.id, "Cancelled", EventKind.CANCELLED, time.time(), "DLJob deleted"
                )
            session.expire(row)

    def _still_there(self, row: Job) -> bool:
        """Asked afresh: the list may predate a DLJob created since."""
        assert row.dljob_namespace is not None and row.dljob_name is not None
        try:
            obj = self.api.get_dljob(row.dljob_namespace, row.dljob_name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return row.dljob_uid in (None, obj["metadata"]["uid"])


def _rv(obj: Obj) -> str:
    return str(obj["metadata"].get("resourceVersion") or "")


def _newer(rv: str, recorded: str) -> bool:
    if rv.isdigit() and recorded.isdigit():
        return int(rv) > int(recorded)
    return rv != recorded
