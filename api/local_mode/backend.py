"""Local mode: the job database in step with a LiveCluster (the simulator on the wall clock).

`create_app` builds one `LocalMode` when settings.live is on; routes hand it the
jobs they accept and cancel through it; its ticker thread syncs the LiveCluster every
settings.sync_interval_s and records each job's state changes as events. A job is
committed to the database before the backend sees it, so an acknowledged job is
never lost: on start, unfinished jobs found in the database are submitted again.
Submissions are committed in groups by `api.store.group_commit.SubmitWriter` (one
transaction for all the requests waiting), each acknowledged after its commit.

The ticker looks at the active jobs and at those finished since its last tick
(`LiveCluster.poll`), never at the whole history, and forgets finished jobs once
recorded: a tick costs what the live jobs cost, however many ran before. Each tick
also hands the LiveCluster the quota tree an admin keeps in the table `queues`
(api/quotas/tree.py) when it changed, and stores the simulated clock.

What an admin sets at runtime (the policy, cordons and drains) is stored before it
takes effect and restored at start with the clock (api.local_mode.state), before the
unfinished jobs are resubmitted, so a restart (a kill -9 included) keeps them and no
job's timeline runs backwards.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.local_mode import state as local_state
from api.local_mode.history import EventRecord, Seen, row_values, transition_events
from api.quotas.tree import DbQuotaStore, Item, checked_tree
from api.settings import Settings
from api.store.group_commit import SubmitWriter
from api.store.models import TERMINAL_STATUSES, Job, JobEvent
from controller.decisions import Displacement
from controller.live import JobState, LiveCluster
from controller.maintenance import NodeAction
from controller.model import JobSpec, JobStatus, Policy, Reason
from controller.model.events import EventKind
from controller.model.precision import parse_precision
from controller.placement import make_placer
from controller.quotas.admission import Quotas
from controller.spec import load_cluster
from policies.registry import UnknownPolicyError, make_policy

log = logging.getLogger(__name__)
FINISHED = frozenset(JobStatus(s) for s in TERMINAL_STATUSES)
JOBS = Job.metadata.tables[Job.__tablename__]
# A waiting job whose reason keeps its code but not its message ("and 41 more behind",
# "3 are free") has its row rewritten at most this often, as the operator does
# (operators/writer.py): every round would rewrite every waiting row as the queue moves.
REASON_REFRESH_S = 10.0
# The simulated clock is stored at most this often (a write of one row); a restart
# resumes at the later of it and the last recorded event, so no timeline runs back.
CLOCK_SAVE_EVERY_S = 1.0


def _update_jobs(session: Session, rows: list[dict[str, Any]]) -> None:
    """UPDATE job rows by id, each dict the id and the columns it sets (the same columns
    in each), as one Core executemany: the ORM's bulk UPDATE by primary key costs
    23-26 us of CPU a row against 18 us (200-row updates on PostgreSQL), and the ticker
    writes thousands of rows a second while a queue grows. `updated_at` is set as the
    ORM set it (the column's onupdate)."""
    if rows:
        by_id = update(JOBS).where(JOBS.c.id == bindparam("row_id"))
        params = [
            {**{k: v for k, v in row.items() if k != "id"}, "row_id": row["id"]} for row in rows
        ]
        session.connection().execute(by_id, params)


def spec_of(job: Job) -> JobSpec:
    """The model's JobSpec of a job row (cluster mode reads a DLJob's instead:
    operators.dljobs.resources.job_spec)."""
    return JobSpec(
        job_id=job.id,
        submit_s=0.0,
        num_gpus=job.num_gpus,
        model=job.model,
        duration_s=job.duration_s,
        iterations=job.iterations,
        min_gpus=job.min_gpus,
        max_gpus=job.max_gpus,
        batch_size=job.batch_size,
        gpu_mem_mib=job.gpu_mem_mib,
        precision=parse_precision(job.precision),
        tenant=job.tenant,
        user=str(job.user_id),
        priority=job.priority,
        deadline_s=job.deadline_s,
    )


def row_spec(row: dict[str, Any]) -> JobSpec:
    """`spec_of` a Job given as its column values (no ORM object to build)."""
    return JobSpec(
        job_id=row["id"],
        submit_s=0.0,
        num_gpus=row["num_gpus"],
        model=row["model"],
        duration_s=row["duration_s"],
        iterations=row["iterations"],
        min_gpus=row["min_gpus"],
        max_gpus=row["max_gpus"],
        batch_size=row["batch_size"],
        gpu_mem_mib=row["gpu_mem_mib"],
        precision=parse_precision(row["precision"]),
        tenant=row["tenant"],
        user=str(row["user_id"]),
        priority=row["priority"],
        deadline_s=row.get("deadline_s"),
    )


class LocalMode:
    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        cluster = load_cluster(settings.cluster)
        self.live = LiveCluster(
            cluster,
            make_policy(settings.policy),
            make_placer(settings.placement, cluster),
            time_scale=settings.time_scale,
            round_interval_s=settings.round_interval_s,
            network=settings.network,
        )
        self.node_names = [n.name for n in cluster.nodes]
        self._settings = settings
        self._sessions = sessions
        self._interval_s = settings.sync_interval_s
        self._seen: dict[str, Seen] = {}  # unfinished jobs (finished ones are forgotten)
        self._cursor = 0  # LiveCluster.poll: finished jobs already recorded
        self._positions: dict[str, int] = {}  # queue positions as last written
        self._queues: list[Item] = []  # the quota tree's queues as last handed to the backend
        self._clock_saved_at = -CLOCK_SAVE_EVERY_S  # time.monotonic() of the last save
        self.writer = SubmitWriter(sessions, self.live.add_jobs)
        # Serialises recording: the ticker's diff-and-write against a cancel's.
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._restore()
        self._resubmit_unfinished()
        self.writer.start()
        self._thread = threading.Thread(target=self._run, name="gpuflow-ticker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.writer.stop()  # the queued submissions are committed (or refused) first
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            with self.lock:
                self._save_clock()  # a clean stop resumes exactly where it stopped
        except SQLAlchemyError as exc:
            log.warning("clock not stored at stop, database unavailable: %s", exc)

    def hand_over(self, job: Job) -> JobSpec:
        """Hand a committed job to the LiveCluster; returns the spec as placed (submit_s)."""
        return self.live.add_job(spec_of(job))

    async def accept(
        self, job: dict[str, Any], event: dict[str, Any], claim: dict[str, Any] | None = None
    ) -> JobSpec:
        """Commit a new job (Job column values), its "submitted" event and its key's
        `claim` with the other requests waiting, then hand it to the LiveCluster; returns
        the spec as placed. Raises api.store.group_commit.KeyTaken if the key was taken."""
        return await self.writer.persist(job, event, row_spec(job), claim)

    def cancel(self, session: Session, job: Job) -> bool:
        """Record the cancel and commit it, then take the job from the backend; False if
        it is already over. Committed first, so a cancel answered is never lost, and one
        whose commit fails leaves the job as it was, in the backend and in the database."""
        with self.lock:
            state = self.live.job(job.id)
            if state is None or state.status in FINISHED:
                return False
            now = self.live.now_s()
            job.status = JobStatus.CANCELLED.value
            job.reason_code = job.reason_message = None
            job.queue_position = None
            session.add(
                JobEvent(job_id=job.id, kind=EventKind.CANCELLED, sim_s=now, detail="by user")
            )
            session.commit()
            # A job that ended in the instant since is recorded as it ended by the ticker.
            self.live.cancel(job.id)
            self._seen[job.id] = Seen(JobStatus.CANCELLED, job.restarts)
            return True

    def set_policy(self, policy: Policy, by: str) -> None:
        """Switch to `policy` as admin `by`: stored first, so a restart keeps it."""
        with self.lock, self._sessions() as session:
            local_state.save_policy(session, policy.name, by)
            session.commit()
            self.live.set_policy(policy)

    def maintain(self, node: str, action: NodeAction, by: str) -> list[str]:
        """Cordon, drain or uncordon `node` as admin `by` (stored first, so a restart
        keeps it); a drain records a "preempted" event naming the node and the admin
        for each job it stopped. KeyError if there is no such node."""
        self.live.cluster.node_index(node)  # KeyError before anything is stored
        with self.lock:
            self._record()  # a job started since the last tick gets its event first
            with self._sessions() as session:
                now = self.live.now_s()
                local_state.save_maintenance(session, node, action, by, now)
                session.commit()
            preempted = self.live.maintain(node, action, by)
            if not preempted:
                return preempted
            now = self.live.now_s()
            detail = f"node {node} drained by {by}"
            events: list[JobEvent] = []
            states: list[JobState] = []
            for job_id in preempted:
                events.append(
                    JobEvent(job_id=job_id, kind=EventKind.PREEMPTED, sim_s=now, detail=detail)
                )
                state = self.live.job(job_id)
                seen = self._seen.get(job_id)
                if state is None or seen is None:
                    continue
                # Already placed elsewhere by the round after the drain: its restart.
                stopped = Seen(JobStatus.PREEMPTED, seen.restarts)
                restart = transition_events(stopped, now, state, node_names=self.node_names)
                events.extend(_event_rows({job_id: restart}))
                states.append(state)
                self._seen[job_id] = Seen(state.status, state.restarts)
            with self._sessions() as session:
                if states:
                    _update_jobs(session, [row_values(s, self.node_names) for s in states])
                session.add_all(events)
                session.commit()
            return preempted

    def tick(self) -> None:
        """Hand the backend the queues an admin changed, sync it and write what changed
        since the last tick."""
        with self.lock:
            self._sync_quotas()
            self._record()
            if time.monotonic() - self._clock_saved_at >= CLOCK_SAVE_EVERY_S:
                self._save_clock()

    def _save_clock(self) -> None:
        with self._sessions() as session:
            local_state.save_clock(session, self.live.now_s())
            session.commit()
        self._clock_saved_at = time.monotonic()

    def _restore(self) -> None:
        """The clock, the policy and the cordons and drains a previous run stored."""
        with self._sessions() as session:
            saved = local_state.load(session)
            explicit = "policy" in self._settings.model_fields_set
            name = local_state.chosen_policy(self._settings.policy, explicit, saved.policy)
            if explicit and saved.policy not in (None, name):
                log.warning("--policy %s replaces the stored policy %s", name, saved.policy)
            if explicit:
                local_state.save_policy(session, name, "--policy")
                session.commit()
        self.live.resume_at(saved.clock_s)
        if name != self.live.policy_name:
            try:
                self.live.set_policy(make_policy(name))
            except UnknownPolicyError:
                log.warning("stored policy %r is unknown, running %s", name, self.live.policy_name)
        for m in saved.maintenance:
            try:
                self.live.maintain(m.node, m.action, m.by)
            except KeyError:
                log.warning("stored %s of node %s: no such node in this cluster", m.action, m.node)

    def _sync_quotas(self) -> None:
        """The table `queues` (REST, api/routes/quotas.py) as the backend's quotas,
        made again only when a queue changed. The routes store only trees that pass the
        loader; a tree that fails anyway (rows written by hand) keeps the last one."""
        with self._sessions() as session:
            items = DbQuotaStore(session).items()
        if items == self._queues:
            return
        try:
            tree = checked_tree(items, "")
        except ValueError as exc:
            log.warning("queues table is not a valid tree, keeping the last one: %s", exc)
            return
        self.live.set_quotas(None if tree is None else Quotas(tree))
        self._queues = items

    def _record(self) -> None:
        """Write what changed since the last record (the caller holds the lock)."""
        states, cursor = self.live.poll(self._cursor, self._wanted)
        now = self.live.now_s()
        changed = [s for s in states if self._changed(s)]
        positions = self.live.queue_positions()
        last = self._positions
        reordered = {j for j in last if j not in positions}
        reordered.update(j for j, p in positions.items() if last.get(j) != p)
        if changed or reordered:
            with self._sessions() as session:
                if changed:
                    moved = self.live.take_displacements(s.job_id for s in changed)
                    labels = _labels(session, moved)
                    events = {
                        s.job_id: transition_events(
                            self._seen.get(s.job_id),
                            now,
                            s,
                            moved=moved.get(s.job_id),
                            node_names=self.node_names,
                            labels=labels.get(s.job_id),
                        )
                        for s in changed
                    }
                    rows = [row_values(s, self.node_names) for s in changed]
                    _update_jobs(session, rows)
                    session.add_all(_event_rows(events))
                done = {s.job_id for s in changed}
                # Waiting jobs whose place moved while they waited on.
                shifted = [
                    {"id": j, "queue_position": positions.get(j)} for j in sorted(reordered - done)
                ]
                if shifted:
                    _update_jobs(session, shifted)
                session.commit()
        self._positions = positions
        at_s = time.monotonic()
        for s in changed:
            self._seen[s.job_id] = Seen(s.status, s.restarts, s.reason, at_s)
        # Recorded (or nothing to record): finished jobs are never polled again.
        self._cursor = cursor
        for s in states:
            if s.status in FINISHED:
                del self._seen[s.job_id]

    def _changed(self, state: JobState) -> bool:
        return self._wanted(state.job_id, state.status, state.restarts, state.reason)

    def _wanted(self, job_id: str, status: JobStatus, restarts: int, reason: Reason | None) -> bool:
        """Whether a job's row needs writing: new, running, its state moved, or the
        reason it waits for changed (its code at once, its message within
        REASON_REFRESH_S): a job recorded before the round that gave it a reason gets
        the reason, and a reason follows the queue."""
        seen = self._seen.get(job_id)
        if seen is None:
            return True
        if seen.status is JobStatus.RUNNING:
            return True  # progress moves: keep the row current
        if seen.status is not status or seen.restarts != restarts:
            return True
        if seen.reason == reason:
            return False
        if seen.reason is None or reason is None or seen.reason.code != reason.code:
            return True
        return time.monotonic() - seen.reason_at_s >= REASON_REFRESH_S

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.tick()
            except SQLAlchemyError as exc:
                # The database is down: nothing is marked seen, so the next tick retries.
                log.warning("job database unavailable, retrying: %s", exc)

    def _resubmit_unfinished(self) -> None:
        with self._sessions() as session:
            unfinished = select(Job).where(Job.status.not_in(TERMINAL_STATUSES))
            # In submission order, as they first came (ties in the policy keep it).
            jobs = session.scalars(unfinished.order_by(Job.created_at, Job.id)).all()
            for job in jobs:
                placed = self.hand_over(job)
                job.status, job.progress, job.nodes = JobStatus.QUEUED.value, 0.0, ""
                detail = "resubmitted after a restart of the service"
                session.add(
                    JobEvent(
                        job_id=job.id,
                        kind=EventKind.SUBMITTED,
                        sim_s=placed.submit_s,
                        detail=detail,
                    )
                )
            session.commit()


def _event_rows(events: dict[str, list[EventRecord]]) -> list[JobEvent]:
    return [
        JobEvent(
            job_id=job_id,
            kind=e.kind,
            sim_s=e.sim_s,
            detail=e.detail,
            by_jobs=list(e.by_jobs) or None,
            allocation=e.allocation,
        )
        for job_id, records in events.items()
        for e in records
    ]


def _labels(session: Session, moved: dict[str, Displacement]) -> dict[str, dict[str, str]]:
    """For each displaced job, how its events name the jobs that took its GPUs: "job
    <id> (<name>)" for a job of its own tenant, "job <id>" for another tenant's (which
    api.jobs.redaction shows its tenant as "another tenant's job"). One query."""
    ids = set(moved) | {j for d in moved.values() for j in d.by}
    if not any(d.by for d in moved.values()):
        return {}
    rows = session.execute(select(Job.id, Job.name, Job.tenant).where(Job.id.in_(ids))).all()
    known = {r.id: (r.name, r.tenant) for r in rows}
    out: dict[str, dict[str, str]] = {}
    for job_id, d in moved.items():
        tenant = known.get(job_id, ("", None))[1]
        out[job_id] = {
            j: f"job {j} ({known[j][0]})" if known.get(j, ("", ""))[1] == tenant else f"job {j}"
            for j in d.by
        }
    return out
