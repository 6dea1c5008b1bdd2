"""Cluster mode: jobs are DLJobs on Kubernetes; the job database follows them.

`KubeBackend` (api.backends.JobBackend) creates a DLJob for each REST submission —
in settings.kube_namespace, labelled with the submitter's tenant and the job's
database id, the row keeping the DLJob's namespace, name and uid. A cancel is
committed first, then the DLJob deleted (api.dljob_reaper, which retries). The
operator schedules it like any DLJob.

`Follower` records every DLJob's history, REST-submitted or made with kubectl: an
informer (operators.informer: list, then watch, relist on 410 Gone) over DLJobs in
all namespaces hands each new version to a writer thread, which diffs it against
what the job's row recorded (api.dljob_history) and writes the events and the row
in one transaction, the row locked (SELECT ... FOR UPDATE on PostgreSQL). A DLJob
seen for the first time without a row of ours gets one (tenant from spec.tenant,
owned by the tenant's `kubectl@<tenant>` user, who has no token). Exactly once:

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

The kubernetes client is reached only through `operators` (api -> operators).
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api import metrics_secrets
from api.backends import BackendUnavailable, ClusterDescription, UnknownNode
from api.cluster_view import topology_of
from api.dljob_history import record
from api.dljob_manifest import dljob_manifest, dljob_name
from api.dljob_reaper import DLJobRef, Reaper
from api.errors import one_line
from api.kube_describe import describe_kube
from api.models import Job, JobEvent, User
from api.node_admin import patch_node
from api.schemas.cluster import NodePublic, TopologyPublic
from api.schemas.jobs import JobCreate
from api.security import hash_token
from api.settings import Settings
from api.train_status import TrainStatusWriter
from controller.maintenance import NodeAction
from operators.informer import Informer, Key, key_of
from operators.kube import (
    API_ERRORS,
    ApiException,
    KubeApi,
    Obj,
    Resource,
    api_client,
    error_message,
    status_code,
)
from operators.nodes import build_cluster
from operators.resources import (
    JOB_DB_ID,
    LABEL_JOB_ID,
    QUEUED,
    foreign_id,
    metrics_secret_name,
    parse_time,
)

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed", "Cancelled")
BATCH = 500  # DLJob versions per transaction
RETRY_S = 0.5  # after the database refused a batch
CAS_TRIES = 5  # a job row changed by another writer meanwhile is read again
# A row whose DLJob was never created (the service stopped between its commit and
# the create) is failed after this long; younger ones may still be on their way.
ORPHAN_AFTER = timedelta(minutes=2)
KUBECTL_USER = "kubectl@{tenant}"


class KubeBackend:
    """Cluster mode's JobBackend: DLJobs for jobs, a Follower for their history."""

    mode = "cluster"

    def __init__(
        self, settings: Settings, sessions: sessionmaker[Session], client: Any = None
    ) -> None:
        self._own_client = client is None
        if client is None:
            client = api_client(settings.kubeconfig, settings.kube_context)
        self.api = KubeApi(client)
        self.namespace = settings.kube_namespace
        self.image = settings.kube_image
        self._sessions = sessions
        self._watch_timeout_s = settings.kube_watch_timeout_s
        self.reaper = Reaper(self.api)
        self.follower = Follower(
            self.api, sessions, watch_timeout_s=self._watch_timeout_s, on_cancelled=self.reaper
        )
        self.train = TrainStatusWriter(
            self.api,
            sessions,
            settings.train_summary_interval_s,
            cached=lambda namespace, name: self.follower.dljobs.get((namespace, name)),
        )

    def start(self) -> None:
        self.reaper.start()
        self.follower.start()
        self.train.start()

    def stop(self) -> None:
        self.train.stop()
        self.follower.stop()
        self.reaper.stop()
        if self._own_client:
            self.api.client.close()  # its connection pool (and any watch left open)

    def gpu_capacity(self) -> int | None:
        if not self.follower.nodes.synced.is_set():
            return None
        gpus = build_cluster(self.follower.nodes.items()).cluster.num_gpus
        return gpus or None  # no GPU node published yet: the operator will say why

    def now_s(self) -> float:
        return time.time()

    def metrics_reported(self, job_id: str) -> None:
        self.train.reported(job_id)

    async def submit(
        self, job: dict[str, Any], event: dict[str, Any], body: JobCreate, metrics_token: str
    ) -> None:
        image = body.image or self.image
        if not image:
            msg = "required in cluster mode (the service has no default, GPUFLOW_KUBE_IMAGE)"
            raise RequestValidationError(
                [{"loc": ("body", "image"), "type": "missing", "msg": msg, "input": None}]
            )
        job["dljob_namespace"] = self.namespace
        job["dljob_name"] = dljob_name(job["name"], job["id"])
        manifest = dljob_manifest(job, body, image)
        job["dljob_uid"] = await run_in_threadpool(
            self._store_and_create, job, event, manifest, metrics_token
        )

    def _store_and_create(
        self, job: dict[str, Any], event: dict[str, Any], manifest: Obj, token: str
    ) -> str:
        """Commit the row, then create the job's metrics-token Secret and its DLJob: the
        follower always finds the row of a DLJob the service made, and no worker pod
        starts before its Secret exists. A DLJob that could not be created takes its
        row and Secret with it (the request fails, nothing was acknowledged)."""
        with self._sessions() as session:
            session.execute(insert(Job), [job])
            session.execute(insert(JobEvent), [event])
            session.commit()
        secret = False
        try:
            metrics_secrets.create(self.api, self.namespace, job["dljob_name"], token)
            secret = True
            created = self.api.create_dljob(self.namespace, manifest)
        except Exception as exc:
            if secret:
                self._forget_secret(job["dljob_name"])
            with self._sessions() as session:
                session.execute(delete(JobEvent).where(JobEvent.job_id == job["id"]))
                session.execute(delete(Job).where(Job.id == job["id"]))
                session.commit()
            if status_code(exc) in (400, 422):
                raise RequestValidationError(
                    [{"loc": ("body",), "type": "value_error", "msg": _message(exc), "input": None}]
                ) from None
            raise BackendUnavailable(f"Kubernetes API: {_message(exc)}") from None
        try:
            metrics_secrets.set_owner(self.api, created)
        except API_ERRORS as exc:  # the job runs; its Secret outlives it
            msg = error_message(exc)
            log.warning("Secret of DLJob %s not owned by it: %s", job["dljob_name"], msg)
        uid = str(created["metadata"]["uid"])
        with self._sessions() as session:
            session.execute(
                update(Job)
                .where(Job.id == job["id"], Job.dljob_uid.is_(None))
                .values(dljob_uid=uid)
            )
            session.commit()
        return uid

    def _forget_secret(self, dljob: str) -> None:
        try:
            self.api.delete_secret(self.namespace, metrics_secret_name(dljob))
        except API_ERRORS as exc:
            log.warning("Secret of uncreated DLJob %s left: %s", dljob, error_message(exc))

    def cancel(self, session: Session, job: Job) -> bool:
        """Commit the cancel, then delete the DLJob: a cancel whose commit fails leaves
        the job as it was; one answered is never undone, the reaper deleting the DLJob
        if Kubernetes refuses now (the follower, seeing it go, finds the job closed)."""
        if not close(session, job.id, "Cancelled", "cancelled", self.now_s(), "by user"):
            session.refresh(job)
            return False
        session.commit()
        session.refresh(job)
        ref = DLJobRef.of_job(job)
        if ref is not None:
            self.reaper.delete_now(ref)
        return True

    def maintain_node(self, name: str, action: NodeAction, by: str) -> NodePublic:
        """Patch the Node (api.node_admin); the node as the patched Node shows it."""
        nodes = self.follower.nodes.items()
        if name not in {n.name for n in build_cluster(nodes).cluster.nodes}:
            raise UnknownNode(name)
        patched = patch_node(self.api, name, action, by, self.now_s())
        seen = [patched if n["metadata"]["name"] == name else n for n in nodes]
        return next(n for n in self.describe(seen).nodes if n.name == name)

    def describe(
        self, node_objs: list[Obj] | None = None, *, gpus: bool = True
    ) -> ClusterDescription:
        """The cluster from the Node cache (or `node_objs`) and the DLJobs' allocations."""
        nodes = self.follower.nodes.items() if node_objs is None else node_objs
        view = build_cluster(nodes)
        dljobs = self.follower.dljobs.items()
        return describe_kube(view, nodes, dljobs, self.now_s(), gpus=gpus)

    def topology(self) -> TopologyPublic:
        return topology_of(build_cluster(self.follower.nodes.items()).cluster)


def _message(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return one_line(Exception(f"{exc.status} {exc.reason or ''} {exc.body or ''}"))
    return one_line(exc)


def close(session: Session, job_id: str, status: str, kind: str, at_s: float, detail: str) -> bool:
    """End a job that has not ended (one atomic UPDATE: of two closers, concurrent or
    not, only the first writes its event); False if it had ended already."""
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.not_in(TERMINAL))
        .values(
            status=status,
            reason_code=None,
            reason_message=None,
            finish_s=func.coalesce(Job.finish_s, at_s),
        )
        .execution_options(synchronize_session=False)
    )
    if _rowcount(result) != 1:
        return False
    session.add(JobEvent(job_id=job_id, kind=kind, sim_s=at_s, detail=detail))
    session.flush()
    return True


def _rowcount(result: Any) -> int:
    return int(result.rowcount)


# -- the follower --------------------------------------------------------------------------

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
            row = self._row(session, obj) or self._adopt(session, obj)
            if row.status in TERMINAL:
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
                .where(Job.id == row.id, Job.status.not_in(TERMINAL), same)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            session.expire(row)
            if _rowcount(result) == 1:
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
        if row is None or row.status in TERMINAL:
            return
        when = obj["metadata"].get("deletionTimestamp")
        at_s = _epoch(when) if when else time.time()
        close(session, row.id, "Cancelled", "cancelled", at_s, "DLJob deleted")
        session.expire(row)

    def _present(self, session: Session, items: list[Obj]) -> None:
        """After a (re)list: close the rows whose DLJob is gone for good."""
        uids = {o["metadata"]["uid"] for o in items}
        names = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in items}
        query = select(Job).where(Job.dljob_name.is_not(None), Job.status.not_in(TERMINAL))
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
                close(session, row.id, "Failed", "failed", time.time(), detail)
            else:
                close(session, row.id, "Cancelled", "cancelled", time.time(), "DLJob deleted")
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

    def _adopt(self, session: Session, obj: Obj) -> Job:
        """A row for a DLJob made without the service (kubectl): on first sight."""
        meta, spec = obj["metadata"], obj.get("spec") or {}
        tenant = str(spec.get("tenant") or "default")[:100]
        gpus = int(spec.get("gpus") or 1)
        created_s = _epoch(meta.get("creationTimestamp"))
        created = datetime.fromtimestamp(created_s, UTC) if created_s else datetime.now(UTC)
        duration = spec.get("expectedDurationSeconds")
        row = Job(
            id=foreign_id(meta["uid"]),
            tenant=tenant,
            user_id=self._kubectl_user(session, tenant),
            name=str(meta["name"])[:100],
            num_gpus=gpus,
            min_gpus=int(spec.get("minGpus") or gpus),
            max_gpus=int(spec.get("maxGpus") or gpus),
            model=str(spec.get("model") or "generic")[:100],
            duration_s=float(duration) if duration else None,
            iterations=None,
            batch_size=spec.get("batchSize"),
            gpu_mem_mib=spec.get("gpuMemMib"),
            priority=int(spec.get("priority") or 0),
            metrics_token_hash=hash_token(self._metrics_token(obj)),
            status=QUEUED,
            progress=0.0,
            attained_gpu_s=0.0,
            restarts=0,
            nodes="",
            submit_s=created_s,
            created_at=created,
            updated_at=datetime.now(UTC),
            dljob_namespace=meta.get("namespace"),
            dljob_name=meta["name"],
            dljob_uid=meta["uid"],
        )
        session.add(row)
        session.add(JobEvent(job_id=row.id, kind="submitted", sim_s=created_s, detail="kubectl"))
        session.flush()
        return row

    def _metrics_token(self, obj: Obj) -> str:
        """The adopted job's metrics token, in a Secret its pods read; if Kubernetes
        refuses the Secret, a token nobody holds (the job runs, reporting nothing)."""
        try:
            return metrics_secrets.adopt(self.api, obj)
        except API_ERRORS as exc:
            name = obj["metadata"]["name"]
            log.warning("no metrics Secret for DLJob %s: %s", name, error_message(exc))
            return secrets.token_urlsafe(32)

    def _kubectl_user(self, session: Session, tenant: str) -> int:
        name = KUBECTL_USER.format(tenant=tenant)[:100]
        user_id = session.scalar(select(User.id).where(User.name == name))
        if user_id is not None:
            return int(user_id)
        try:
            with session.begin_nested():
                user = User(name=name, tenant=tenant, role="user")
                session.add(user)
            return user.id
        except IntegrityError:  # another replica made it meanwhile
            user_id = session.scalar(select(User.id).where(User.name == name))
            assert user_id is not None
            return int(user_id)


def _rv(obj: Obj) -> str:
    return str(obj["metadata"].get("resourceVersion") or "")


def _newer(rv: str, recorded: str) -> bool:
    if rv.isdigit() and recorded.isdigit():
        return int(rv) > int(recorded)
    return rv != recorded


def _epoch(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return parse_time(text)
    except ValueError:
        return 0.0
