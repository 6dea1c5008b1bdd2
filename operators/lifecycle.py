"""The part of each round that needs no policy: settling what the pods say.

Called by KubeBackend.sync() before the controller decides, and by apply() to stop
jobs. Finalizers go on every live DLJob and come off a deleted one once none of its
pods is left unfinished; a gang whose every rank succeeded makes the job Succeeded;
a failed rank, a lost rank or a lost node tears the gang down (graceful deletion,
so the workers can checkpoint) and the job waits to restart from its checkpoint,
or fails after `backoffLimit` worker failures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from controller.model import Plan
from operators import crd
from operators.jobs import JobRecord, State
from operators.nodes import ClusterView
from operators.pods import finished, pod_phase, terminating
from operators.resources import (
    FAILED,
    PREEMPTED,
    RUNNING,
    SUCCEEDED,
    Reasoned,
    backoff_limit,
    format_time,
    grace_period_s,
    phase_of,
    status_mutator,
)
from operators.writer import Writer


class Lifecycle:
    def __init__(self, writer: Writer, clock: Callable[[], float]) -> None:
        self.writer = writer
        self.clock = clock

    def settle(self, records: Mapping[str, JobRecord], view: ClusterView) -> None:
        now = self.clock()
        present = {n.name for i, n in enumerate(view.cluster.nodes) if i not in view.down_nodes}
        for rec in records.values():
            finalizers = rec.obj["metadata"].get("finalizers") or []
            if rec.state is State.DELETING:
                self._delete(rec, crd.FINALIZER in finalizers, now)
                continue
            if crd.FINALIZER not in finalizers and rec.state is not State.FINISHED:
                self.writer.set_finalizer(rec.obj, True)
            if rec.state is State.INVALID:
                why = Reasoned("InvalidSpec", rec.error)
                self.writer.status(rec.obj, status_mutator(FAILED, why, now_s=now))
            elif rec.state is State.SUCCEEDED:
                self._succeeded(rec, now)
            elif rec.state is State.WORKER_FAILED:
                self._worker_failed(rec, now)
            elif rec.state is State.BROKEN:
                self._teardown(rec, Reasoned("GangBroken", "a worker pod is missing"), now)
            elif rec.state is State.RUNNING:
                lost = sorted({s.node for s in rec.shares} - present)
                if lost:
                    msg = f"node(s) {', '.join(lost)} down or gone"
                    self._teardown(rec, Reasoned("NodeLost", msg), now)
                else:
                    self._running(rec, now)

    def stop(self, rec: JobRecord, why: Reasoned, phase: str, plan: Plan, now: float) -> None:
        """Stop a running job gracefully as the plan says (preempt, suspend, restart)."""
        reason = plan.reason_for(rec.key)
        pending = Reasoned(reason.code, reason.message) if reason else None
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        mutate = status_mutator(phase, why, pending=pending, add=self._service(rec, now), now_s=now)
        self.writer.status(rec.obj, mutate)
        self.writer.event(rec.obj, why.reason, why.message)

    # -- helpers -------------------------------------------------------------------------

    def _service(self, rec: JobRecord, end_s: float) -> dict[str, float]:
        if rec.started_s is None:
            return {}
        ran = max(0.0, end_s - rec.started_s)
        weight = sum(s.fraction for s in rec.shares)
        return {"attainedGpuSeconds": weight * ran, "executedSeconds": ran}

    def _delete(self, rec: JobRecord, has_finalizer: bool, now: float) -> None:
        alive = [p for p in rec.pods if not finished(p) and not terminating(p)]
        self.writer.delete_pods(alive, grace_period_s(rec.obj), now)
        if has_finalizer and not rec.unfinished_pods():
            self.writer.set_finalizer(rec.obj, False)

    def _succeeded(self, rec: JobRecord, now: float) -> None:
        why = Reasoned("AllWorkersSucceeded", f"attempt {rec.attempt}: every worker succeeded")
        fields = {"completionTime": format_time(now), "nodes": ""}
        mutate = status_mutator(
            SUCCEEDED, why, fields=fields, add=self._service(rec, now), now_s=now
        )
        if mutate(rec.obj) is not None:
            self.writer.status(rec.obj, mutate)
            self.writer.event(rec.obj, why.reason, why.message)

    def _worker_failed(self, rec: JobRecord, now: float) -> None:
        failures = int((rec.obj.get("status") or {}).get("failures") or 0) + 1
        failed = [p["metadata"]["name"] for p in rec.pods if pod_phase(p) == "Failed"]
        msg = f"worker(s) {', '.join(sorted(failed))} failed ({failures} failure(s))"
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        fields = {"failures": failures, "nodes": ""}
        if failures > backoff_limit(rec.obj):
            why = Reasoned("BackoffLimitExceeded", msg)
            mutate = status_mutator(
                FAILED, why, fields=fields, add=self._service(rec, now), now_s=now
            )
            kind = "Warning"
        else:
            why = Reasoned("WorkerFailed", msg + "; restarts from its checkpoint")
            pending = Reasoned("Restarting", "waits to restart after a worker failure")
            mutate = status_mutator(
                PREEMPTED,
                why,
                pending=pending,
                fields=fields,
                add=self._service(rec, now),
                now_s=now,
            )
            kind = "Warning"
        self.writer.status(rec.obj, mutate)
        self.writer.event(rec.obj, why.reason, why.message, kind)

    def _teardown(self, rec: JobRecord, why: Reasoned, now: float) -> None:
        self.writer.delete_pods(rec.live, grace_period_s(rec.obj), now)
        pending = Reasoned("Restarting", "waits to restart from its checkpoint")
        mutate = status_mutator(
            PREEMPTED,
            why,
            pending=pending,
            fields={"nodes": ""},
            add=self._service(rec, now),
            now_s=now,
        )
        self.writer.status(rec.obj, mutate)
        self.writer.event(rec.obj, why.reason, why.message, "Warning")

    def _running(self, rec: JobRecord, now: float) -> None:
        if not all(pod_phase(p) in ("Running", "Succeeded") for p in rec.live):
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
        self.writer.status(rec.obj, status_mutator(RUNNING, why, fields=fields, now_s=now))
        if phase_of(rec.obj) != PREEMPTED:
            self.writer.event(rec.obj, why.reason, why.message)
