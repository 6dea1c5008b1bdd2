"""The job database: SQLAlchemy 2 models. Alembic (alembic/versions) mirrors these.

Written by the routes, local mode's ticker (api.local_mode.backend) and the replay tasks
(api.tasks); a test checks that the migrations produce exactly these tables.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAME_LEN = 100
# The `Job.status` values a row never leaves, in both modes: local mode's ticker
# (api.local_mode.backend) writes controller.model.JobStatus values, cluster mode's follower and
# cancel (api.cluster_mode.follower, api.store.job_close) the DLJob's final phase or "Cancelled".
TERMINAL_STATUSES = ("Succeeded", "Failed", "Cancelled")
IDEMPOTENCY_KEY_LEN = 255  # the longest Idempotency-Key header kept (api.store.idempotency)


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and read back in UTC, with its zone, on every database.

    PostgreSQL keeps the zone (timestamptz); SQLite keeps none, so its values come back
    naive unless this adds UTC, and the API would answer them without an offset."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"a naive timestamp cannot be stored: {value!r}")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    role: Mapped[str] = mapped_column(String(16))  # "admin" | "user"
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Token(Base):
    """A bearer token: only its sha256 is kept; the secret is shown once."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    # The spec as asked (controller.model.JobSpec fields).
    num_gpus: Mapped[int] = mapped_column(Integer)
    min_gpus: Mapped[int] = mapped_column(Integer)
    max_gpus: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(NAME_LEN))
    duration_s: Mapped[float | None] = mapped_column(Float)
    iterations: Mapped[float | None] = mapped_column(Float)
    batch_size: Mapped[int | None] = mapped_column(Integer)
    gpu_mem_mib: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer)
    # controller.model.precision.Precision's value; rows from before it: tf32.
    precision: Mapped[str] = mapped_column(String(8), default="tf32", server_default="tf32")
    # Seconds after submission by which it must finish (JobSpec.deadline_s); None:
    # best-effort.
    deadline_s: Mapped[float | None] = mapped_column(Float)
    metrics_token_hash: Mapped[str] = mapped_column(String(64))
    # What the backend last reported (local mode's ticker keeps these current); one of
    # TERMINAL_STATUSES once the job has ended.
    status: Mapped[str] = mapped_column(String(16), index=True)
    reason_code: Mapped[str | None] = mapped_column(String(NAME_LEN))
    reason_message: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    attained_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    nodes: Mapped[str] = mapped_column(Text, default="")  # comma-separated node names
    submit_s: Mapped[float | None] = mapped_column(Float)  # the backend's clock
    first_start_s: Mapped[float | None] = mapped_column(Float)
    finish_s: Mapped[float | None] = mapped_column(Float)
    # While it waits: its 1-based place in the active policy's order (controller.decisions).
    queue_position: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    # Cluster mode (api.cluster_mode.backend): the job's DLJob, and what the follower
    # (api.cluster_mode.follower) last recorded of it — the resourceVersion and the status it
    # diffed against (phase, restarts, each condition's status and lastTransitionTime),
    # so history is written once.
    dljob_namespace: Mapped[str | None] = mapped_column(String(63))
    dljob_name: Mapped[str | None] = mapped_column(String(63))
    dljob_uid: Mapped[str | None] = mapped_column(String(64))
    dljob_version: Mapped[str | None] = mapped_column(String(64))
    dljob_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class JobEvent(Base):
    """One change of a job's life: submitted, started, preempted, finished, cancelled."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    sim_s: Mapped[float | None] = mapped_column(Float)
    detail: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # A stop: the ids of the jobs given its GPUs in the same round (who preempted it).
    by_jobs: Mapped[list[str] | None] = mapped_column(JSON)
    # A start: where it runs, [{"node": name, "gpus": [index, ...]}, ...].
    allocation: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)


class JobMetric(Base):
    """A figure a running job reported (loss, throughput, ...) with its job token."""

    __tablename__ = "job_metrics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    value: Mapped[float] = mapped_column(Float)
    step: Mapped[int | None] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TraceFile(Base):
    """An uploaded trace, validated on upload; the file lives under the data dir."""

    __tablename__ = "traces"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    fmt: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    jobs: Mapped[int] = mapped_column(Integer)
    skipped: Mapped[int] = mapped_column(Integer)
    span_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Sweep(Base):
    """Policies x traces x clusters, one replay each (each started by api.replays.dispatch)."""

    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Replay(Base):
    __tablename__ = "replays"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    trace_id: Mapped[int] = mapped_column(ForeignKey("traces.id", ondelete="CASCADE"))
    sweep_id: Mapped[int | None] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), index=True
    )
    policy: Mapped[str] = mapped_column(String(32))
    cluster: Mapped[str] = mapped_column(String(NAME_LEN))
    placement: Mapped[str] = mapped_column(String(32))
    interval_s: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(Integer)
    max_time_s: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # queued|running|succeeded|failed
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    headline: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    out_dir: Mapped[str | None] = mapped_column(Text)
    plots: Mapped[dict[str, str] | None] = mapped_column(JSON)  # name -> path
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Written as a running replay reports progress; a stale one means its runner died
    # (api.replays.reconcile).
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # When the dispatcher (api.replays.dispatch) last sent this queued replay to a runner
    # (None: waiting for a free one), and how many times it sent it: a replay sent and
    # not started in time lost its task and is sent again, or failed after the last try
    # (api.replays.reconcile).
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    dispatches: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class IdempotencyKey(Base):
    """A submission's Idempotency-Key (api.store.idempotency): what it was used for, the job it
    created and the first answer, so that a retry within the window gets that answer and
    no second job, replay or sweep."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("user_id", "key", name="uq_idempotency_keys_user_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(IDEMPOTENCY_KEY_LEN))
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of the request body
    # The route it was used on (POST /api/v1/<scope>: "jobs", "replays", "replays/sweeps"):
    # one key per user across routes, so a job's key is refused for a replay.
    scope: Mapped[str] = mapped_column(String(32), default="jobs", server_default="jobs")
    # Jobs only; no foreign key: stored before the job. A replay's id is in its answer.
    job_id: Mapped[str | None] = mapped_column(String(32))
    response: Mapped[dict[str, Any]] = mapped_column(JSON)  # the first 201/202 body
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class QueueRecord(Base):
    """A node of the quota tree (controller.model.quotas), as an admin defined it over
    the API in local mode (api/quotas/store.py); cluster mode keeps Queue resources."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    parent: Mapped[str | None] = mapped_column(String(63))
    # GPUs of any model (an int) or per model ({"A100": 32}); None: the children's sum.
    guarantee: Mapped[Any] = mapped_column(JSON, nullable=True)
    limit: Mapped[Any] = mapped_column(JSON, nullable=True)  # as guarantee; None: no limit
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    tenants: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class LocalSetting(Base):
    """What an admin set at runtime in local mode that a restart must keep (api.local_mode.backend):
    `policy` ({"name": ...}, the last PUT /policies/active) and `clock`
    ({"sim_s": ...}, the simulated time of the ticker's last tick)."""

    __tablename__ = "local_settings"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(JSON)
    set_by: Mapped[str | None] = mapped_column(String(NAME_LEN))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class NodeMaintenance(Base):
    """A node an admin cordoned or drained in local mode (api.local_mode.backend), restored at
    start; an uncordon deletes its row."""

    __tablename__ = "node_maintenance"

    node: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    action: Mapped[str] = mapped_column(String(16))  # controller.maintenance.NodeAction
    set_by: Mapped[str] = mapped_column(String(NAME_LEN))
    sim_s: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class ClusterSample(Base):
    """The whole cluster at one sample of api.samples (a mean over `step_s` once the
    compaction has merged the samples of a bin): GPUs allocated and their utilisation
    and memory, the queue's length and waits. Times in the backend's clock."""

    __tablename__ = "cluster_samples"

    t_s: Mapped[float] = mapped_column(Float, primary_key=True)
    step_s: Mapped[float] = mapped_column(Float)  # the span the row stands for
    gpus: Mapped[int] = mapped_column(Integer)
    gpus_allocated: Mapped[float] = mapped_column(Float)
    util: Mapped[float | None] = mapped_column(Float)  # 0..1, over GPUs with a reading
    mem_used_mib: Mapped[float | None] = mapped_column(Float)
    mem_total_mib: Mapped[float | None] = mapped_column(Float)
    gpus_unhealthy: Mapped[float] = mapped_column(Float)
    running: Mapped[float] = mapped_column(Float)
    waiting: Mapped[float] = mapped_column(Float)
    wait_mean_s: Mapped[float | None] = mapped_column(Float)  # of the jobs waiting then
    wait_max_s: Mapped[float | None] = mapped_column(Float)


class NodeSample(Base):
    """One node at one sample of api.samples; `gpus` holds its GPUs' figures by index,
    as api.samples.rows.GpuFigures keeps them (integers, null where not known)."""

    __tablename__ = "node_samples"

    t_s: Mapped[float] = mapped_column(Float, primary_key=True)
    node: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    step_s: Mapped[float] = mapped_column(Float)
    gpus_allocated: Mapped[float] = mapped_column(Float)
    util: Mapped[float | None] = mapped_column(Float)
    mem_used_mib: Mapped[float | None] = mapped_column(Float)
    gpus: Mapped[dict[str, Any]] = mapped_column(JSON)


class TenantSample(Base):
    """One tenant's GPUs and queue at one sample of api.samples."""

    __tablename__ = "tenant_samples"

    t_s: Mapped[float] = mapped_column(Float, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    step_s: Mapped[float] = mapped_column(Float)
    gpus: Mapped[float] = mapped_column(Float)  # held, shared GPUs by fraction
    running: Mapped[float] = mapped_column(Float)
    waiting: Mapped[float] = mapped_column(Float)
    wait_max_s: Mapped[float | None] = mapped_column(Float)
