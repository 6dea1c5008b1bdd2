"""The backend's writes: pods, services, DLJob status and finalizers, events.

Writes of one round go out in parallel on a small thread pool and `flush()` waits
for them, so a round ends with its writes done and in the caches (write-through);
nothing is written while the operator is not the leader. Two status writes to one
DLJob in a round land in the order they were made: the later one waits for the
earlier (a conflict then makes it re-read and re-apply its change on top). Failures
are logged and left to the next round, which sees the cluster as it is and tries
again.

Every decision the backend and the lifecycle carry out ends in an `event()` (a
Kubernetes Event on the DLJob), and a waiting job's reason in `status_throttled()`:
the writer logs each as one line `decision job=.. action=.. reason=..` (with the
GPUs and nodes of a start, the pods of a stop) and counts it in the operator's
metrics. Nothing is logged or counted while not leading: nothing is written then.

A worker pod the API server refuses to create is logged by KubeApi with its verb,
resource and code, and at `flush()` the job's status says why it has no pods, with a
Warning event (repeated at most every PENDING_REFRESH_S while the message stays the
same), so that `kubectl describe dljob` says why it waits; the start that made no pod
is not counted as an attempt:

- 403 (the operator's ClusterRole lacks `create` on pods, or a ResourceQuota of the
  namespace is used up): back to Queued with reason Forbidden and the server's
  message; 5xx, 429 and other refusals: the same with reason FailedCreate (the word
  Kubernetes' own controllers use). Either is tried again after a back-off held in
  status.restartAfter (`RETRY`: 1 s, doubling with each refusal in a row up to
  10 s; operators/lifecycle.py waits it out in phase Queued), and starts
  once the server allows. Without the back-off every round (one each min_gap_s
  after the status write it made) tried again: 200 refused creates and some 600
  status writes in 10 s for one job on the sandbox.
- 400 or 422 (the pod the spec makes is malformed: the template passes the DLJob's
  schema but not the Pod's): phase Invalid with reason InvalidPodTemplate and the
  server's message naming the field, status.observedGeneration the spec's
  generation; it is not tried again until the spec is edited (operators/jobs.py).
  Before, such a job was started again every round, 20 a second, its attempt count
  climbing, its status saying Admitted.

A pod delete the API server fails is sent again after the same back-off, at the end
of a later round: the cache shows the pod terminating from the first try on, so no
round asks again, and before, a DLJob deleted during such a fault kept its pod and
its finalizer until something changed the pod.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from operators import crd
from operators.dljobs.resources import (
    INVALID,
    INVALID_POD_TEMPLATE,
    QUEUED,
    Reasoned,
    job_id,
    status_mutator,
)
from operators.kube import API_ERRORS, KubeApi, Obj
from operators.kube.errors import ALREADY_EXISTS, FORBIDDEN, ApiException, error_message
from operators.kube.informer import Caches, newer
from operators.kube.times import format_time, micro_time
from operators.logs import emit, one_line
from operators.metrics import OperatorMetrics
from operators.pods import WorkerSpec, headless_service, worker_pods
from operators.pods.failure_policy import RestartPolicy

if TYPE_CHECKING:
    from operators.jobs import JobRecord

log = logging.getLogger(__name__)

# Parallel writes: enough to hide one request's latency behind others, few enough
# not to flood an API server (client-go's default QPS is 5, burst 10; operators that
# start thousands of pods raise it, as we do here).
WRITERS = 16
# A waiting job's why-pending message changes as GPUs free up ("3 are free"); it is
# rewritten at most this often unless its reason code changes.
PENDING_REFRESH_S = 10.0
# A job whose pods the API server refused waits 1 s before its next try, doubled with
# each refusal in a row up to 10 s: a fixed role answers within 10 s. Failed pod
# deletes are sent again on the same schedule.
RETRY = RestartPolicy(base_s=1.0, cap_s=10.0)
# Pod creates refused for the pod itself: the spec must change (module docstring).
MALFORMED = frozenset({400, 422})
FAILED_CREATE = "FailedCreate"
# The action each Event reason stands for, in the decision log lines; a reason not
# listed is logged as action "event".
ACTIONS = {
    "Scheduled": "start",
    "WorkersRunning": "running",
    "AllWorkersSucceeded": "succeed",
    "WorkerFailed": "restart",
    "WorkerCheckpointed": "restart",
    "WorkerFailureIgnored": "restart",
    "GangBroken": "restart",
    "NodeLost": "restart",
    "StartTimeout": "requeue",
    "BackoffLimitExceeded": "fail",
    "CreateContainerConfigError": "fail",  # past backoffLimit (operators/lifecycle.py)
    "CreateContainerError": "fail",
    "InvalidImageName": "fail",
    "PodFailurePolicy": "fail",
    "InvalidSpec": "invalid",
    "Forbidden": "requeue",  # its pods refused by RBAC or a ResourceQuota
    "FailedCreate": "requeue",  # its pods refused otherwise (5xx, 429)
    "InvalidPodTemplate": "invalid",  # its pods refused as malformed (400, 422)
    "Unschedulable": "unschedulable",
    "Refused": "refuse",  # deadline admission (controller.model.job.REFUSED)
    "PreemptedByPolicy": "preempt",
    "PreemptedForReclaim": "preempt",
    "SuspendedByPolicy": "suspend",
    "ResizedByPolicy": "resize",
    "MigratedByPolicy": "migrate",
    "Rebatched": "rebatch",
}


def _key(obj: Obj) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def composed(mutators: list[Callable[[Obj], Obj | None]]) -> Callable[[Obj], Obj | None]:
    """One status mutator doing each of `mutators` in turn (None: none changed
    anything), so that a retry after a conflict re-applies them all."""

    def mutate(obj: Obj) -> Obj | None:
        changed = False
        for m in mutators:
            new = m(obj)
            if new is not None:
                obj, changed = new, True
        return obj if changed else None

    return mutate


class Writer:
    def __init__(
        self,
        api: KubeApi,
        caches: Caches,
        leading: Callable[[], bool],
        metrics: OperatorMetrics | None = None,
        api_url: str = "",
    ) -> None:
        self.api = api
        self.caches = caches
        self.api_url = api_url  # the worker pods' GPUFLOW_API_URL (operators.pods)
        self.leading = leading
        self.metrics = metrics
        # job -> what its start or stop did (GPUs, nodes, pods), logged with its event
        self._details: dict[str, dict[str, Any]] = {}
        self._pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="gpuflow-write")
        self._futures: list[Future[Any]] = []
        self._last_status: dict[str, Future[Any]] = {}  # this round's, by job
        # Status changes waiting for the job's next write (`stage`), by job.
        self._staged: dict[str, tuple[Obj, list[Callable[[Obj], Obj | None]]]] = {}
        self._services: set[tuple[str, str]] = set()
        self._pending: dict[str, tuple[str, float]] = {}  # job -> (reason code, written at)
        # (namespace, job) -> (status code, the API server's message), for jobs whose
        # pods the API server refused this round
        self._refused: dict[tuple[str, str], tuple[int | None, str]] = {}
        self._refused_lock = threading.Lock()
        self._refused_events: dict[tuple[str, str], tuple[str, float]] = {}  # (message, at)
        self._refusals: dict[tuple[str, str], int] = {}  # refusals in a row, by job
        # pod -> (grace s, when to send its delete again (monotonic), failures in a row)
        self._undeleted: dict[tuple[str, str], tuple[int, float, int]] = {}
        self._lock = threading.Lock()
        self.writes = 0

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any] | None:
        if not self.leading():
            return None
        self.writes += 1
        future = self._pool.submit(fn, *args)
        self._futures.append(future)
        return future

    def _submit_status(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> None:
        """Submit a status write that starts once the job's previous one (this round)
        is done, from the object that one stored: it does not conflict with it. The
        pool takes tasks in submission order, so the one waited for has a thread
        already: no wait can hold up the task it waits for."""
        key = _key(obj)
        before = self._last_status.get(key)

        def write() -> Obj | None:
            latest = obj
            if before is not None and before.exception() is None:  # waits for it
                stored = before.result()
                if stored is not None and newer(stored, obj):
                    latest = stored
            return self._status(latest, mutate)

        future = self._submit(write)
        if future is not None:
            self._last_status[key] = future

    def flush(self) -> None:
        self._retry_deletes()
        staged, self._staged = self._staged, {}
        for obj, mutators in staged.values():
            self._submit_status(obj, composed(mutators))
        self._last_status = {}
        for job, details in self._details.items():  # pods deleted without an event
            emit(log, logging.INFO, "decision", job=job, **details)
        self._details = {}
        futures, self._futures = self._futures, []
        for f in futures:
            try:
                f.result()
            except API_ERRORS:
                pass  # KubeApi logged it; the next round sees the cluster as it is
            except Exception as exc:  # one failed write must not stop the round
                emit(log, logging.WARNING, "write failed", error=one_line(exc))
        with self._refused_lock:
            refused, self._refused = self._refused, {}
        for key, (code, message) in refused.items():
            self._report_refused(key, code, message)

    def _report_refused(self, key: tuple[str, str], code: int | None, message: str) -> None:
        """The job whose pods the API server refused back to Queued until a back-off
        ends, or Invalid until its spec is edited, saying why (after this round's
        other writes, its start's status among them)."""
        obj = self.caches.dljobs.get(key)
        if obj is None:
            return
        # The start that made no pod is no attempt: its count goes back.
        attempt = max(0, int((obj.get("status") or {}).get("attempt") or 1) - 1)
        fields: dict[str, Any] = {"attempt": attempt, "restarts": max(0, attempt - 1)}
        wall = time.time()
        if code in MALFORMED:
            why = Reasoned(INVALID_POD_TEMPLATE, f"its worker pod is malformed: {message}")
            fields["observedGeneration"] = obj["metadata"].get("generation")
            mutate = status_mutator(INVALID, why, fields=fields, now_s=wall)
        else:
            reason = "Forbidden" if code == FORBIDDEN else FAILED_CREATE
            why = Reasoned(reason, f"its pods cannot be created: {message}")
            refusals = self._refusals.get(key, 0) + 1
            self._refusals[key] = refusals
            fields["restartAfter"] = micro_time(wall + RETRY.delay_s(refusals))
            mutate = status_mutator(QUEUED, why, pending=why, fields=fields, now_s=wall)
        now = time.monotonic()
        try:
            self._status(obj, mutate)
        except API_ERRORS:
            return  # KubeApi logged it; the next round tries the start again
        last = self._refused_events.get(key)
        # Every round tries again: one event per message, repeated every PENDING_REFRESH_S.
        if last is None or last[0] != message or now - last[1] >= PENDING_REFRESH_S:
            self._refused_events[key] = (message, now)
            self.event(obj, why.reason, why.message, "Warning")

    def close(self) -> None:
        self.flush()
        self._pool.shutdown(wait=True)

    # -- DLJobs --------------------------------------------------------------------------

    def status(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> None:
        staged = self._staged.pop(_key(obj), None)
        if staged is not None:
            mutate = composed([*staged[1], mutate])
        if mutate(obj) is None:
            return  # nothing to change: no request
        self._submit_status(obj, mutate)

    def stage(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> None:
        """A status change that goes out with the job's next status write of this
        round (one request: a new job's arrival stamp with its start or its reason to
        wait), or alone at `flush()` if the round makes none."""
        if mutate(obj) is None or not self.leading():
            return
        key = _key(obj)
        _, mutators = self._staged.setdefault(key, (obj, []))
        mutators.append(mutate)

    def _status(self, obj: Obj, mutate: Callable[[Obj], Obj | None]) -> Obj | None:
        new = self.api.update_status(obj, mutate)
        if new is not None:
            self.caches.dljobs.upsert(new)
        return new

    def status_throttled(
        self, obj: Obj, code: str, phase: str, pending: Reasoned, now: float
    ) -> None:
        """Report why a job waits; the same reason code is rewritten at most every
        PENDING_REFRESH_S."""
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        status = obj.get("status") or {}
        last = self._pending.get(key)
        same = status.get("reason") == code and status.get("phase") == phase
        if same and last is not None and last[0] == code and now - last[1] < PENDING_REFRESH_S:
            return
        why = pending
        for cond in status.get("conditions") or []:
            if cond["type"] == phase and phase != "Queued":
                why = Reasoned(cond.get("reason", ""), cond.get("message", ""))
        mutate = status_mutator(phase, why, pending=pending, now_s=now)
        if mutate(obj) is not None and self.leading():
            if last is None or last[0] != code:
                fields = {"job": key, "action": "wait", "reason": code}
                emit(log, logging.INFO, "decision", **fields, message=pending.message)
            self._pending[key] = (code, now)
            self.status(obj, mutate)

    def set_finalizer(self, obj: Obj, present: bool) -> None:
        finalizers = [f for f in obj["metadata"].get("finalizers") or [] if f != crd.FINALIZER]
        if present:
            finalizers.append(crd.FINALIZER)
        new = {**obj, "metadata": {**obj["metadata"], "finalizers": finalizers}}
        new.pop("status", None)
        self._submit(self._replace, new, present)

    def _replace(self, obj: Obj, keep: bool) -> None:
        stored = self.api.replace_dljob(obj)  # 409 on a stale object: next round retries
        if keep:
            self.caches.dljobs.upsert(stored)

    # -- pods, services, events ----------------------------------------------------------

    def start(self, rec: JobRecord, worker: WorkerSpec) -> None:
        key = (rec.namespace, rec.name)
        if not self.leading():
            return
        if key not in self._services:
            self._services.add(key)
            self._submit(self._create_service, key, headless_service(rec.obj))
        pods = worker_pods(worker, self.api_url)
        for pod in pods:
            self._submit(self._create_pod, rec.namespace, pod, rec.name)
        gpus = sum(s.fraction for s in worker.shares)
        self._details[rec.key] = {
            "action": "start",
            "gpus": f"{gpus:g}",
            "nodes": ",".join(sorted({s.node for s in worker.shares})),
            "pods": len(pods),
            "attempt": worker.attempt,
        }

    def _create_service(self, key: tuple[str, str], service: Obj) -> None:
        """The job's headless service (its ranks find the master through it); made
        again at its next start if the API server refused it (KubeApi logged why)."""
        try:
            self.api.create_service(key[0], service)
        except API_ERRORS:
            with self._refused_lock:
                self._services.discard(key)
            raise

    def _create_pod(self, namespace: str, pod: Obj, job: str) -> None:
        try:
            self.caches.pods.upsert(self.api.create_pod(namespace, pod))
            with self._refused_lock:
                self._refusals.pop((namespace, job), None)
        except ApiException as exc:
            if exc.status != ALREADY_EXISTS:  # one the watch has not brought yet
                with self._refused_lock:
                    self._refused[(namespace, job)] = (exc.status, error_message(exc))
            raise

    def delete_pods(self, pods: list[Obj], grace_s: int, now: float) -> None:
        if pods and self.leading():
            meta = pods[0]["metadata"]
            job = f"{meta['namespace']}/{meta.get('labels', {}).get(crd.LABEL_JOB, '')}"
            self._details[job] = {"action": "delete-pods", "pods": len(pods), "grace_s": grace_s}
        for pod in pods:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if self.leading():
                self.caches.pods.mark_deleting(key, format_time(now))
            self._submit(self._delete_pod, key, grace_s)

    def _delete_pod(self, key: tuple[str, str], grace_s: int) -> None:
        """Delete a pod the cache now shows terminating; if the API server fails the
        request, send it again after a back-off (`_retry_deletes`): no round asks
        again for a pod it sees terminating."""
        try:
            self.api.delete_pod(key[0], key[1], grace_s)
        except API_ERRORS:
            with self._refused_lock:
                failures = self._undeleted.get(key, (grace_s, 0.0, 0))[2] + 1
                retry_at = time.monotonic() + RETRY.delay_s(failures)
                self._undeleted[key] = (grace_s, retry_at, failures)
            raise
        with self._refused_lock:
            self._undeleted.pop(key, None)

    def _retry_deletes(self) -> None:
        """Send again each failed pod delete whose back-off has passed (a pod gone from
        the cache needs none)."""
        now = time.monotonic()
        with self._refused_lock:
            due = [(k, v) for k, v in self._undeleted.items() if v[1] <= now]
        for key, (grace_s, _, failures) in due:
            if self.caches.pods.get(key) is None:
                with self._refused_lock:
                    self._undeleted.pop(key, None)
            elif self._submit(self._delete_pod, key, grace_s) is not None:
                with self._refused_lock:  # in flight: not due again until it fails
                    self._undeleted[key] = (grace_s, math.inf, failures)

    def annotate_pods(self, pods: list[Obj], annotations: Mapping[str, str | None]) -> None:
        """Set annotations on running pods (the kubelet refreshes downward-API files
        from them: how a running job learns a new batch size without a restart); a
        None value removes the annotation (merge patch)."""
        for pod in pods:
            meta = pod["metadata"]
            patch = {"metadata": {"annotations": dict(annotations)}}
            self._submit(self._patch_pod, meta["namespace"], meta["name"], patch)

    def _patch_pod(self, namespace: str, name: str, patch: Obj) -> None:
        new = self.api.patch_pod(namespace, name, patch)
        if new is not None:
            self.caches.pods.upsert(new)

    def event(self, obj: Obj, reason: str, message: str, kind: str = "Normal") -> None:
        meta = obj["metadata"]
        if not self.leading():
            return
        self._decided(job_id(obj), reason, message, kind)
        now = micro_time(time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": crd.API_VERSION,
                "kind": crd.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "eventTime": now,
            "reportingComponent": crd.MANAGER,
            "reportingInstance": crd.MANAGER,
            "action": reason,
            "source": {"component": crd.MANAGER},
        }
        self._submit(self.api.create_event, meta["namespace"], body)

    def _decided(self, job: str, reason: str, message: str, kind: str) -> None:
        """Log and count one decision, with what its start or stop did."""
        action = ACTIONS.get(reason, "event")
        details = self._details.pop(job, {})
        if details.get("action") not in (None, action):
            details["pods_action"] = details.pop("action")
        details.pop("action", None)
        level = logging.WARNING if kind == "Warning" else logging.INFO
        emit(
            log,
            level,
            "decision",
            job=job,
            action=action,
            **details,
            reason=reason,
            message=message,
        )
        if self.metrics is not None:
            self.metrics.decision(action, reason)
