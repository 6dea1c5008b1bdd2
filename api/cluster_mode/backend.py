"""Cluster mode: jobs are DLJobs on Kubernetes; the job database follows them.

`ClusterModeBackend` (api.backends.JobBackend; made by api.backend_factory when the service
has a kubeconfig or runs in a cluster) creates a DLJob for each REST submission — in
settings.kube_namespace, labelled with the submitter's tenant and the job's database
id, the row keeping the DLJob's namespace, name and uid. A cancel is committed first
(api.store.job_close), then the DLJob deleted (api.cluster_mode.reaper, which retries). The
operator schedules it like any DLJob. Node maintenance patches the Node
(api.cluster_mode.node_admin); describe and topology read the follower's Node and DLJob caches.
The policy the operator runs and its options are read from its ConfigMap
(operators.policy_config.read_running), at most every POLICY_READ_S.

Every DLJob's history, REST-submitted or made with kubectl, is recorded by the
`Follower` (api.cluster_mode.follower) this backend starts and stops.

The kubernetes client is reached only through `operators` (api -> operators).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session, sessionmaker

from api.backends import BackendUnavailable, ClusterDescription, UnknownNode
from api.cluster_mode import metrics_secrets
from api.cluster_mode.describe import describe_kube
from api.cluster_mode.follower import Follower
from api.cluster_mode.manifest import dljob_manifest, dljob_name
from api.cluster_mode.node_admin import patch_node
from api.cluster_mode.reaper import DLJobRef, Reaper
from api.cluster_mode.train_status import TrainStatusWriter
from api.cluster_mode.worker_logs import cluster_worker_logs
from api.cluster_view import topology_of
from api.field_errors import invalid
from api.http.errors import one_line
from api.jobs.type_throughput import type_throughput_public
from api.schemas.cluster import NodePublic, TopologyPublic
from api.schemas.job_logs import JobLogsPublic
from api.schemas.jobs import JobCreate, TypeThroughputPublic
from api.settings import Settings
from api.store.idempotency import KeyTaken, claim_batch
from api.store.job_close import close
from api.store.models import IdempotencyKey, Job, JobEvent
from controller.maintenance import NodeAction
from controller.model.events import EventKind
from operators.dljobs.resources import metrics_secret_name
from operators.dljobs.type_throughput import recorded
from operators.kube import (
    API_ERRORS,
    ApiException,
    KubeApi,
    Obj,
    api_client,
    error_message,
    status_code,
)
from operators.nodes import build_cluster
from operators.policy_config import RunningPolicy, read_choice, read_running

log = logging.getLogger(__name__)

# How long a read of the policy ConfigMap serves: the Cluster page polls every second,
# and the operator reads the ConfigMap every 2 s (operators.operator.POLICY_READ_S).
POLICY_READ_S = 2.0


class ClusterModeBackend:
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
        self._policy_lock = threading.Lock()
        self._policy: tuple[float, RunningPolicy | None] | None = None  # (read at, what)

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

    async def accept(
        self,
        job: dict[str, Any],
        event: dict[str, Any],
        body: JobCreate,
        metrics_token: str,
        claim: dict[str, Any] | None = None,
    ) -> None:
        image = body.image or self.image
        if not image:
            msg = "required in cluster mode (the service has no default, GPUFLOW_KUBE_IMAGE)"
            raise invalid(("body", "image"), msg, None, kind="missing")
        job["dljob_namespace"] = self.namespace
        job["dljob_name"] = dljob_name(job["name"], job["id"])
        manifest = dljob_manifest(job, body, image)
        job["dljob_uid"] = await run_in_threadpool(
            self._store_and_create, job, event, manifest, metrics_token, claim
        )

    def _store_and_create(
        self,
        job: dict[str, Any],
        event: dict[str, Any],
        manifest: Obj,
        token: str,
        claim: dict[str, Any] | None,
    ) -> str:
        """Commit the row (with its key's claim), then create the job's metrics-token
        Secret and its DLJob: the follower always finds the row of a DLJob the service
        made, and no worker pod starts before its Secret exists. A DLJob that could not
        be created takes its row, claim and Secret with it (the request fails, nothing
        was acknowledged, a retry starts afresh)."""
        with self._sessions() as session:
            if claim is not None and not claim_batch(session.connection(), [claim])[0]:
                raise KeyTaken(claim["key"])
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
                if claim is not None:
                    session.execute(
                        delete(IdempotencyKey).where(
                            IdempotencyKey.user_id == claim["user_id"],
                            IdempotencyKey.key == claim["key"],
                        )
                    )
                session.execute(delete(JobEvent).where(JobEvent.job_id == job["id"]))
                session.execute(delete(Job).where(Job.id == job["id"]))
                session.commit()
            if status_code(exc) in (400, 422):
                raise invalid(("body",), _message(exc), None) from None
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
        if not close(session, job.id, "Cancelled", EventKind.CANCELLED, self.now_s(), "by user"):
            session.refresh(job)
            return False
        session.commit()
        session.refresh(job)
        ref = DLJobRef.of_job(job)
        if ref is not None:
            self.reaper.delete_now(ref)
        return True

    def maintain_node(self, name: str, action: NodeAction, by: str) -> NodePublic:
        """Patch the Node (api.cluster_mode.node_admin); the node as the patched Node shows it."""
        nodes = self.follower.nodes.items()
        if name not in {n.name for n in build_cluster(nodes).cluster.nodes}:
            raise UnknownNode(name)
        patched = patch_node(self.api, name, action, by, self.now_s())
        seen = [patched if n["metadata"]["name"] == name else n for n in nodes]
        return next(n for n in self.describe(seen).nodes if n.name == name)

    def worker_logs(self, job: Job, worker: int, tail_lines: int) -> JobLogsPublic:
        return cluster_worker_logs(self.api, job, worker, tail_lines)

    def running_policy(self) -> RunningPolicy | None:
        """The policy the operator runs and its options, as it last wrote them into the
        policy ConfigMap; before it has (an operator of an older version), the policy an
        admin chose, options unknown; None if neither. A read at most POLICY_READ_S old
        serves; an API error (KubeApi logged it) is raised, and the policy is unknown
        until the next read (the Cluster page's polls do not repeat it every second)."""
        with self._policy_lock:
            if self._policy is not None and time.monotonic() - self._policy[0] < POLICY_READ_S:
                return self._policy[1]
            self._policy = (time.monotonic(), None)
            running = read_running(self.api, self.namespace)
            if running is None:
                choice = read_choice(self.api, self.namespace)
                running = None if choice is None else RunningPolicy(choice.name, {})
            self._policy = (time.monotonic(), running)
            return running

    def nodes_version(self) -> int | None:
        return None  # the Nodes and DLJobs move outside the service: describe each time

    def describe(
        self, node_objs: list[Obj] | None = None, *, gpus: bool = True
    ) -> ClusterDescription:
        """The cluster from the Node cache (or `node_objs`) and the DLJobs' allocations,
        with the policy the operator runs ("unknown" when the ConfigMap cannot be read)."""
        nodes = self.follower.nodes.items() if node_objs is None else node_objs
        view = build_cluster(nodes)
        dljobs = self.follower.dljobs.items()
        try:
            policy = self.running_policy()
        except API_ERRORS:
            policy = None
        return describe_kube(view, nodes, dljobs, self.now_s(), gpus=gpus, policy=policy)

    def topology(self) -> TopologyPublic:
        return topology_of(build_cluster(self.follower.nodes.items()).cluster)

    def type_throughput(self, job: Job) -> list[TypeThroughputPublic]:
        if job.dljob_namespace is None or job.dljob_name is None:
            return []
        dljob = self.follower.dljobs.get((job.dljob_namespace, job.dljob_name))
        if dljob is None or (job.dljob_uid and dljob["metadata"].get("uid") != job.dljob_uid):
            return []  # gone, or another DLJob of the same name
        record = recorded(dljob.get("status") or {})
        return type_throughput_public((record[t] for t in sorted(record)), "measured")


def _message(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return one_line(Exception(f"{exc.status} {exc.reason or ''} {exc.body or ''}"))
    return one_line(exc)
