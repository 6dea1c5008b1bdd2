"""The part of each round that needs no policy: settling what the pods say.

Called by KubeBackend.sync() before the controller decides, and by PlanApplier.apply
(operators/applier.py) to stop jobs. Finalizers go on every live DLJob and come off
a deleted one once none of its pods is left unfinished; a gang whose every rank
succeeded makes the job Succeeded. A failed rank is judged once per attempt
(operators/pods/failure_policy.py): the gang is torn down (graceful deletion, so the
workers can checkpoint; failed pods stay, for their logs) and the job restarts from
its checkpoint (or from the beginning without one), in phase BackOff after a
back-off if the failure counts, or fails (podFailurePolicy FailJob, or past
`backoffLimit`). A lost rank or node, or pods not all running
within the start timeout, tear the gang down and requeue the job without counting;
a worker the kubelet cannot create for its configuration (a missing Secret, a bad
image name) counts as a failure after CONFIG_ERROR_S. A starting job (GPUs reserved
in status.pendingStart while leaving pods hold them) is requeued if a node of its
reservation leaves or the pods are not gone within its start timeout. `next_check_s`
says when a back-off or a start timeout ends, so that the operator's loop looks again
then.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from controller.model import Plan
from operators import crd
from operators.dljobs.resources import (
    BACKOFF,
    FAILED,
    INVALID,
    PREEMPTED,
    QUEUED,
    RUNNING,
    STOPPED_PHASES,
    SUCCEEDED,
    Reasoned,
    backoff_limit,
    grace_period_s,
    phase_of,
    restart_point,
    status_mutator,
)
from operators.jobs import JobRecord, State
from operators.kube import Obj
from operators.kube.times import format_time, micro_time, parse_time
from operators.nodes import ClusterView
from operators.pods import finished, pod_phase, terminating
from operators.pods.failure_policy import RestartPolicy, RuleAction, judge
from operators.pods.status import waiting_reason, worker_waiting
from operators.writer import Writer

Mutator = Callable[[Obj], Obj | None]
# Waiting reasons a kubelet gives a container it cannot create for the pod's own
# configuration (a missing Secret or ConfigMap key, a bad image name): retrying the
# same pod does not help, so after CONFIG_ERROR_S they count as a failed attempt.
CONFIG_ERRORS = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "InvalidImageName"}
)
# Long enough for a Secret made just after the pod (the API's metrics token) to land.
CONFIG_ERROR_S = 30.0


class Lifecycle:
    def __init__(
        self,
        writer: Writer,
        clock: Callable[[], float],
        restart: RestartPolicy | None = None,
    ) -> None:
        self.writer = writer
        self.clock = clock
        self.restart = restart or RestartPolicy()
        self.config_error_s = CONFIG_ERROR_S
        # The earliest moment (wall-clock s) settle() must look again although nothing
        # changes: a back-off or a start timeout ending. None: no such moment.
        self.next_check_s: float | None = None

    def settle(self, records: Mapping[str, JobRecord], view: ClusterView) -> None:
        now = self.clock()
        self.next_check_s = None
        present = {n.name for i, n in enumerate(view.cluster.nodes) if i not in view.down_nodes}
        for rec in records.values():
            finalizers = rec.obj["metadata"].get("finalizers") or []
            if rec.state is State.DELETING:
                self._delete(rec, crd.FINALIZER in finalizers, now)
                continue
            if crd.FINALIZER not in finalizers and rec.state is not State.FINISHED:
                self.writer.set_finalizer(rec.obj, True)
            if rec.state is State.INVALID:
                # Not terminal and no pod touched: a fixed spec queues (or keeps) the job.
                why = Reasoned(rec.error_reason, rec.error)
                invalid = status_mutator(INVALID, why, now_s=now)
                if invalid(rec.obj) is not None:
                    self.writer.status(rec.obj, invalid)
                    self.writer.event(rec.obj, why.reason, why.message, "Warning")
            elif rec.state is State.SUCCEEDED:
                self._succeeded(rec, now)
            elif rec.state is State.WORKER_FAILED:
                self._worker_failed(rec, now)
            elif rec.state is State.BACKOFF:
                self._backoff(rec, now)
            elif rec.state is State.BROKEN:
                why = Reasoned("GangBroken", "a worker pod is missing or was stopped")
                self._teardown(rec, why, now)
            elif rec.state is State.STARTING:
                self._starting(rec, present, now)
            elif rec.state is State.RUNNING:
                lost = sorted({s.node for s in rec.shares} - present)
                if lost:
                    msg = f"node(s) {', '.join(lost)} down or gone"
                    self._teardown(rec, Reasoned("NodeLost", msg), now)
                else:
                    self._running(rec, now)

    def stop(
        self,
        rec: JobRecord,
        why: Reasoned,
        phase: str,
        plan: Plan,
        now: float,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Stop a running job gracefully as the plan says (preempt, suspend, restart);
        `fields`: status fields to set with it (who took its GPUs, its GPU use)."""
        reason = plan.reason_for(rec.key)
        pending = Reasoned(reason.code, reason.message) if reason else None
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        service = self._service(rec, now)
        mutate = status_mutator(phase, why, pending=pending, fields=fields, add=service, now_s=now)
        self.writer.status(rec.obj, mutate)
        self.writer.event(rec.obj, why.reason, why.message)

    def drain(self, rec: JobRecord, node: str, by: str, now: float) -> None:
        """Preempt a running job gracefully for an admin's drain of `node`
        (operators/drain.py): as a policy's preemption, with the drain as the reason."""
        why = Reasoned("PreemptedByDrain", f"preempted: node {node} drained by {by}")
        pending = Reasoned("NodeDrained", why.message)
        self._teardown(rec, why, now, pending=pending, event_kind="Normal")

    # -- helpers -------------------------------------------------------------------------

    def _wake_at(self, t: float, now: float) -> None:
        if t > now and (self.next_check_s is None or t < self.next_check_s):
            self.next_check_s = t

    def _service(self, rec: JobRecord, end_s: float) -> dict[str, float]:
        """Attained service of the attempt: from when its whole gang ran to `end_s`."""
        if rec.running_s is None:
            return {}
        ran = max(0.0, end_s - rec.running_s)
        weight = sum(s.fraction for s in rec.shares)
        return {"attainedGpuSeconds": weight * ran, "executedSeconds": ran}

    def _write(self, rec: JobRecord, mutate: Mutator, why: Reasoned, kind: str) -> None:
        """Write the status and, if it changes, the event."""
        if mutate(rec.obj) is not None:
            self.writer.status(rec.obj, mutate)
            self.writer.event(rec.obj, why.reason, why.message, kind)

    def _delete(self, rec: JobRecord, has_finalizer: bool, now: float) -> None:
        alive = [p for p in rec.pods if not finished(p) and not terminating(p)]
        self.writer.delete_pods(alive, grace_period_s(rec.obj), now)
        if has_finalizer and not rec.unfinished_pods():
            self.writer.set_finalizer(rec.obj, False)

    def _succeeded(self, rec: JobRecord, now: float) -> None:
        why = Reasoned("AllWorkersSucceeded", f"attempt {rec.attempt}: every worker succeeded")
        end = now
        if rec.finished_s is not None:
            # finishedAt is kept to the second: the last worker ended before it + 1 s.
            end = min(now, rec.finished_s + 1.0)
        fields = {"completionTime": format_time(now), "nodes": ""}
        mutate = status_mutator(
            SUCCEEDED, why, fields=fields, add=self._service(rec, end), now_s=now
        )
        self._write(rec, mutate, why, "Normal")

    def _worker_failed(self, rec: JobRecord, now: float) -> None:
        """Judge the attempt's failure once (keyed by status.failedAttempt), tear the
        gang down, and fail the job or requeue it (after a back-off if it counts)."""
        verdict = judge(rec.failed, rec.rules)
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        fields: dict[str, object] = {"failedAttempt": rec.attempt, "nodes": ""}
        add = self._service(rec, now)
        restarting = Reasoned("Restarting", f"waits to restart {restart_point(rec.obj)}")
        if verdict.action is RuleAction.FAIL_JOB:
            why = Reasoned("PodFailurePolicy", f"{verdict.describe()}: FailJob")
            mutate = status_mutator(FAILED, why, fields=fields, add=add, now_s=now)
        elif verdict.action is RuleAction.IGNORE:
            reason = "WorkerCheckpointed" if verdict.checkpointed else "WorkerFailureIgnored"
            why = Reasoned(reason, f"{verdict.describe()}: not counted; restarts at once")
            mutate = status_mutator(
                PREEMPTED, why, pending=restarting, fields=fields, add=add, now_s=now
            )
        else:
            why, mutate = self._counted(rec, verdict.describe(), fields, add, now)
        kind = "Normal" if verdict.checkpointed else "Warning"
        self._write(rec, _once(rec.attempt, mutate), why, kind)

    def _counted(
        self,
        rec: JobRecord,
        what: str,
        fields: dict[str, object],
        add: Mapping[str, float],
        now: float,
        fail_reason: str = "BackoffLimitExceeded",
        retry: str = "",
    ) -> tuple[Reasoned, Mutator]:
        """A failure that counts against spec.backoffLimit: the job Failed past it
        (`fail_reason`), else in phase BackOff, to restart after the back-off (`retry`
        says how; by default from where it resumes, restart_point)."""
        failures = int((rec.obj.get("status") or {}).get("failures") or 0) + 1
        fields["failures"] = failures
        limit = backoff_limit(rec.obj)
        msg = f"{what}: failure {failures} (backoffLimit {limit})"
        if failures > limit:
            why = Reasoned(fail_reason, msg)
            return why, status_mutator(FAILED, why, fields=fields, add=add, now_s=now)
        until = now + self.restart.delay_s(failures)
        fields["restartAfter"] = micro_time(until)
        retry = retry or f"restarts {restart_point(rec.obj)}"
        why = Reasoned("WorkerFailed", f"{msg}; {retry}")
        wait = Reasoned("BackOff", f"back-off: restarts after {micro_time(until)}")
        self._wake_at(until, now)
        return why, status_mutator(BACKOFF, why, pending=wait, fields=fields, add=add, now_s=now)

    def _config_error(self, rec: JobRecord, pod: Obj, now: float) -> None:
        """A worker that cannot start for its configuration (a missing Secret or
        ConfigMap, a bad image name) counts as a failed attempt: the gang torn down,
        the job retried after the back-off and Failed past spec.backoffLimit, with
        the kubelet's reason, instead of holding its GPUs and being requeued for ever."""
        state = worker_waiting(pod)
        reason = str(state.get("reason") or "CreateContainerConfigError")
        name = pod["metadata"]["name"]
        what = f"pod {name} cannot start: {reason}: {state.get('message') or 'no message'}"
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        fields: dict[str, object] = {"failedAttempt": rec.attempt, "nodes": ""}
        retry = "tried again after the back-off"
        why, mutate = self._counted(rec, what, fields, {}, now, fail_reason=reason, retry=retry)
        self._write(rec, _once(rec.attempt, mutate), why, "Warning")

    def _backoff(self, rec: JobRecord, now: float) -> None:
        """Wait out status.restartAfter; then clear it, which requeues the job (in
        phase BackOff until it runs again: it waits because it failed; a Queued job,
        whose pods the API server refused (operators/writer.py), stays Queued with
        that reason)."""
        assert rec.restart_after_s is not None
        if now < rec.restart_after_s:
            self._wake_at(rec.restart_after_s, now)
            return
        phase = phase_of(rec.obj) if phase_of(rec.obj) in STOPPED_PHASES | {QUEUED} else BACKOFF
        why = _condition(rec.obj, phase) or Reasoned("WorkerFailed", "")
        ended = Reasoned("Restarting", f"back-off ended at {micro_time(rec.restart_after_s)}")
        mutate = status_mutator(phase, why, pending=ended, now_s=now)
        self.writer.status(rec.obj, _clear_restart_after(mutate))

    def _teardown(
        self,
        rec: JobRecord,
        why: Reasoned,
        now: float,
        pending: Reasoned | None = None,
        event_kind: str = "Warning",
    ) -> None:
        """Delete `rec`'s pods and mark it preempted (its service so far added), to
        restart as `pending` says; an event of `event_kind` tells why."""
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        pending = pending or Reasoned("Restarting", f"waits to restart {restart_point(rec.obj)}")
        mutate = status_mutator(
            PREEMPTED,
            why,
            pending=pending,
            fields={"nodes": ""},
            add=self._service(rec, now),
            now_s=now,
        )
        self.writer.status(rec.obj, mutate)
        self.writer.event(rec.obj, why.reason, why.message, event_kind)

    def _running(self, rec: JobRecord, now: float) -> None:
        waiting = [p for p in rec.live if pod_phase(p) not in ("Running", "Succeeded")]
        if waiting:
            created = [_created_s(p, rec, now) for p in waiting]
            broken = [p for p in waiting if waiting_reason(p) in CONFIG_ERRORS]
            if broken and now >= min(created) + self.config_error_s:
                self._config_error(rec, broken[0], now)
                return
            deadline = min(created) + rec.start_timeout_s
            if now >= deadline:
                self._start_timeout(rec, waiting, now)
            else:
                self._wake_at(deadline, now)
            return
        if phase_of(rec.obj) == RUNNING:
            return
        nodes = sorted({s.node for s in rec.shares})
        fields = {
            "attempt": rec.attempt,
            "restarts": rec.attempt - 1,
            "nodes": ",".join(nodes),
            "allocation": {"nodes": nodes, "shares": [s.to_json() for s in rec.shares]},
        }
        why = Reasoned("WorkersRunning", f"{len(rec.live)} worker pod(s) running")
        mutate = status_mutator(RUNNING, why, fields=fields, now_s=now)
        self.writer.status(rec.obj, _clear_restart_after(mutate))
        if phase_of(rec.obj) not in (PREEMPTED, BACKOFF):
            self.writer.event(rec.obj, why.reason, why.message)

    def _starting(self, rec: JobRecord, present: set[str], now: float) -> None:
        """Requeue a starting job whose reserved GPUs left, or were not freed within
        its start timeout (a pod stuck terminating); else look again at the timeout."""
        lost = sorted({s.node for s in rec.shares} - present)
        assert rec.started_s is not None
        deadline = rec.started_s + rec.start_timeout_s
        if lost:
            why = Reasoned("NodeLost", f"reserved GPUs on node(s) {', '.join(lost)}, down or gone")
        elif now >= deadline:
            msg = f"its GPUs were not freed within {rec.start_timeout_s:g} s; requeued"
            why = Reasoned("StartTimeout", msg)
        else:
            self._wake_at(deadline, now)
            return
        phase = phase_of(rec.obj) if phase_of(rec.obj) in STOPPED_PHASES else QUEUED
        self._write(rec, status_mutator(phase, why, now_s=now), why, "Warning")

    def _start_timeout(self, rec: JobRecord, waiting: list[Obj], now: float) -> None:
        """Free the GPUs of an attempt whose pods did not all run in time; requeue it."""
        names = []
        for pod in sorted(waiting, key=lambda p: str(p["metadata"]["name"])):
            name, cause = str(pod["metadata"]["name"]), waiting_reason(pod)
            names.append(f"{name} ({cause})" if cause else name)
        msg = (
            f"pod(s) {', '.join(names)} still {pod_phase(waiting[0])} "
            f"{rec.start_timeout_s:g} s after creation; GPUs freed, requeued"
        )
        why = Reasoned("StartTimeout", msg)
        self._teardown(rec, why, now, pending=why)


def _created_s(pod: Obj, rec: JobRecord, now: float) -> float:
    created = pod["metadata"].get("creationTimestamp")
    if created:
        return parse_time(created)
    return rec.started_s if rec.started_s is not None else now


def _condition(obj: Obj, ctype: str) -> Reasoned | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return Reasoned(str(cond.get("reason") or ""), str(cond.get("message") or ""))
    return None


def _once(attempt: int, mutate: Mutator) -> Mutator:
    """`mutate`, unless the DLJob's status already settled this attempt's failure (a
    retry after a conflict, or another operator, got there first)."""

    def guarded(obj: Obj) -> Obj | None:
        if int((obj.get("status") or {}).get("failedAttempt") or 0) >= attempt:
            return None
        return mutate(obj)

    return guarded


def _clear_restart_after(mutate: Mutator) -> Mutator:
    """`mutate`, and status.restartAfter removed: the back-off is over."""

    def clearing(obj: Obj) -> Obj | None:
        new = mutate(obj)
        base = new if new is not None else obj
        status = base.get("status") or {}
        if "restartAfter" not in status:
            return new
        out = copy.copy(base)
        out["status"] = {k: v for k, v in status.items() if k != "restartAfter"}
        return out

    return clearing
