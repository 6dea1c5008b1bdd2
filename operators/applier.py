"""Carrying out one round's plan on the cluster: stops, new batch sizes, starts, and
why each waiting job waits.

Called by KubeBackend.apply (operators/backend.py) with the `Round` its observe()
saw and the actions controller.actions.compile_plan made of the plan. Every stop
goes before every start (operators/lifecycle.py stops the pods); a new batch size is
written in place; a start makes pods only once the job's own previous pods are gone
(their SIGTERM checkpoint written) and its GPU shares fit next to every unfinished
pod in the pod cache (`Occupancy`). Until then the job is starting: its GPUs are
reserved in `status.pendingStart`, the policy sees it running on them (resuming after
its restart cost, as a replay's restarted job), and each round retries its start
while the plan keeps it there. Then the queue positions due
(operators/queue_status.py) are staged and each waiting job's reason written, all
through the operator's Writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from controller.actions import JobAction
from controller.decisions import RoundRecord
from controller.model import Action, Allocation, GpuPool, Plan, Reason, Snapshot
from controller.model.events import EVENT_OF_ACTION, EventKind
from controller.model.job import REFUSED
from controller.model.sharing import SharingMode
from operators import crd
from operators.dljobs.resources import (
    ADMITTED,
    ALLOCATED_GPUS,
    FAILED,
    PENDING_START,
    PREEMPTED,
    QUEUED,
    STOPPED_PHASES,
    SUSPENDED,
    Reasoned,
    fields_mutator,
    phase_of,
    status_mutator,
)
from operators.dljobs.template import pod_requests
from operators.jobs import JobRecord, State
from operators.kube.times import format_time, micro_time
from operators.lifecycle import Lifecycle
from operators.nodes import ClusterView
from operators.pods import Occupancy, ShareRecord, WorkerSpec
from operators.queue_status import (
    PREEMPTED_BY,
    QUEUE_POSITION,
    PositionThrottle,
    position_mutator,
    preempted_by,
    takers,
    without_position,
)
from operators.views import gpu_use_fields
from operators.writer import Writer

# Why an admitted job has no pods yet while its previous attempt's pods are still
# stopping (writing their SIGTERM checkpoint): a new attempt never overlaps the last.
WAITING_CHECKPOINT = "WaitingForCheckpoint"
# The reason controller.quotas.reclaim gives a job it preempts for another queue's
# guarantee: its Event says so (PreemptedForReclaim), not that the policy chose it.
RECLAIMED = "Reclaimed"


@dataclass
class Round:
    """What KubeBackend.observe() saw, for apply() to act on."""

    snapshot: Snapshot
    records: dict[str, JobRecord]
    view: ClusterView
    occupancy: Occupancy
    plan_pool: GpuPool
    uuid_mem: dict[str, int] = field(default_factory=dict)


class PlanApplier:
    """Writes one round's actions (see the module's docstring); the queue positions'
    throttle is kept here from round to round."""

    def __init__(
        self, writer: Writer, lifecycle: Lifecycle, policy_name: Callable[[], str]
    ) -> None:
        self.writer = writer
        self.lifecycle = lifecycle
        self.policy_name = policy_name
        self.positions = PositionThrottle()

    def apply(
        self,
        rnd: Round,
        plan: Plan,
        actions: Sequence[JobAction],
        record: RoundRecord | None,
        now: float,
    ) -> None:
        """Carry out `actions`, compiled from `plan` on `rnd`; `record` is the round as
        controller.decisions recorded it (queue positions, preemptors), if any."""
        for a in actions:
            rec = rnd.records[a.job_id]
            if a.stops:
                suspend = a.action is Action.SUSPEND
                by = takers(record, a.job_id, rnd.records)
                why = self._stop_reason(a.action, by, plan.reason_for(a.job_id))
                phase = SUSPENDED if suspend else PREEMPTED
                fields = {PREEMPTED_BY: by, **gpu_use_fields(rnd.snapshot.job(a.job_id))}
                self.lifecycle.stop(rec, why, phase, plan, now, fields=fields)
            elif a.action is Action.REBATCH:
                self._rebatch(rec, a.batch_size)
        for a in actions:
            if a.starts:
                assert a.allocation is not None
                self._start(rnd, rnd.records[a.job_id], a.allocation, a.batch_size, now)
        acted = {a.job_id for a in actions}
        for key, rec in rnd.records.items():
            if rec.state is State.STARTING and key not in acted and key in plan.run:
                batch = plan.batch_sizes.get(key, rec.pending_batch)
                self._start(rnd, rec, plan.run[key], batch, now)
        started = {a.job_id for a in actions if a.starts}
        if record is not None:
            # Staged: each goes out with the job's reason to wait, in one request.
            written = {k: _position(rnd.records[k].obj) for k in record.positions}
            for key, position in self.positions.due(record.positions, written, now):
                self.writer.stage(rnd.records[key].obj, position_mutator(position))
        for job in rnd.snapshot.waiting():
            if job.job_id not in started:
                self._report_waiting(rnd.records[job.job_id], plan, now)
        self.writer.flush()

    def _rebatch(self, rec: JobRecord, batch: int | None) -> None:
        """A new batch size for a running job, without a restart: its pods' annotation
        (the job reads it through the downward API at a step boundary) and status."""
        if batch is None:
            return
        self.writer.annotate_pods(rec.live, {crd.ANN_BATCH_SIZE: str(batch)})
        self.writer.status(rec.obj, fields_mutator({"batchSize": batch}))
        msg = f"batch size {batch} by the {self.policy_name()} policy"
        self.writer.event(rec.obj, "Rebatched", msg)

    def _stop_reason(self, action: Action, by: list[str], planned: Reason | None) -> Reasoned:
        if action is Action.PREEMPT and planned is not None and planned.code == RECLAIMED:
            # Not the policy's choice: the queues' reclaim (controller.quotas.reclaim).
            return Reasoned("PreemptedForReclaim", planned.message)
        name = self.policy_name()
        verb = str(EVENT_OF_ACTION.get(action, EventKind.PREEMPTED))
        message = f"{verb} by the {name} policy{preempted_by(by)}"
        return Reasoned(f"{verb.capitalize()}ByPolicy", message)

    def _start(
        self, rnd: Round, rec: JobRecord, alloc: Allocation, batch: int | None, now: float
    ) -> None:
        cluster = rnd.view.cluster
        shares = tuple(
            ShareRecord(
                cluster.nodes[s.node].name,
                s.gpu,
                cluster.nodes[s.node].gpus[s.gpu].uuid,
                s.fraction,
            )
            for s in alloc.shares
        )
        mem = (rec.spec.gpu_mem_mib or 0) if rec.spec else 0
        requests = pod_requests(rec.obj)
        leaving = rec.unfinished_pods()
        busy = rnd.occupancy.conflict(shares, mem, rnd.uuid_mem, requests)
        if leaving:
            n = len(leaving)
            busy = Reasoned(
                WAITING_CHECKPOINT, f"its previous attempt's {n} pod(s) have not exited yet"
            )
        if busy is not None:
            self._reserve(rec, shares, batch, busy, now)
            return
        rnd.occupancy.add(shares, mem, rec.name, requests)
        attempt = rec.attempt + 1
        sliced = frozenset(
            n.name for n in cluster.nodes if n.sharing is SharingMode.TIME_SLICING
        ) & {s.node for s in shares}
        worker = WorkerSpec(rec.obj, shares, attempt, batch, format_time(now), sliced)
        self.writer.start(rec, worker)
        nodes = sorted({s.node for s in shares})
        fields = {
            ALLOCATED_GPUS: round(sum(s.fraction for s in shares), 3),
            "attempt": attempt,
            "restarts": attempt - 1,
            "nodes": ",".join(nodes),
            "startTime": format_time(now),
            "allocation": {"nodes": nodes, "shares": [s.to_json() for s in shares]},
            "bandwidthGbps": min(cluster.nodes[cluster.node_index(n)].nic_gbps for n in nodes)
            if len(nodes) > 1
            else 0.0,
        }
        if batch is not None:
            fields["batchSize"] = batch
        if not (rec.obj.get("status") or {}).get("firstStartTime"):
            fields["firstStartTime"] = micro_time(now)
        why = Reasoned("Scheduled", f"{len(shares)} GPU(s) on {', '.join(nodes)}")
        mutate = status_mutator(ADMITTED, why, fields=fields, now_s=now)
        self.writer.status(rec.obj, without_position(mutate))
        self.writer.event(rec.obj, "Scheduled", f"attempt {attempt}: {why.message}")

    def _reserve(
        self,
        rec: JobRecord,
        shares: tuple[ShareRecord, ...],
        batch: int | None,
        busy: Reasoned,
        now: float,
    ) -> None:
        """Admit the job on `shares` without pods yet: status.pendingStart holds them
        (its `since` kept while the shares stay the same) until `busy` is over."""
        held = [s.to_json() for s in shares]
        old = (rec.obj.get("status") or {}).get(PENDING_START) or {}
        since = old.get("since") if old.get("shares") == held else None
        reservation = {"since": since or micro_time(now), "shares": held}
        if batch is not None:
            reservation["batchSize"] = batch
        why = Reasoned(busy.reason, f"admitted; waits: {busy.message}")
        fields = {PENDING_START: reservation}
        self.writer.status(rec.obj, status_mutator(ADMITTED, why, fields=fields, now_s=now))

    def _report_waiting(self, rec: JobRecord, plan: Plan, now: float) -> None:
        reason = plan.reason_for(rec.key)
        if reason is not None and reason.code == REFUSED:
            self._refuse(rec, reason.message, now)
            return
        pending = Reasoned(reason.code, reason.message) if reason else Reasoned("Waiting", "")
        phase = phase_of(rec.obj)
        if phase not in STOPPED_PHASES:
            phase = QUEUED
        self.writer.status_throttled(rec.obj, pending.reason, phase, pending, now)

    def _refuse(self, rec: JobRecord, message: str, now: float) -> None:
        """A job the policy refuses (deadline admission: controller.model.job.REFUSED)
        never runs: it fails at once, its Failed condition and a Warning event saying
        why (what it would need, by when)."""
        first = phase_of(rec.obj) != FAILED
        why = Reasoned(REFUSED, message)
        self.writer.status(rec.obj, status_mutator(FAILED, why, now_s=now))
        if first:
            self.writer.event(rec.obj, REFUSED, message, "Warning")


def _position(obj: dict[str, object]) -> int | None:
    status = obj.get("status")
    position = status.get(QUEUE_POSITION) if isinstance(status, dict) else None
    return position if isinstance(position, int) else None
