"""The service's one settings class, read from GPUFLOW_* environment variables.

Built by `create_app`, the Celery worker (api.tasks) and `gpuflow serve`; never at
import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration. Every field can be set as GPUFLOW_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="GPUFLOW_", extra="ignore")

    data_dir: Path = Field(default=Path("data/service"), description="uploads, plots, SQLite")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file under data_dir"
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker (redis://...); None runs tasks in-process"
    )
    celery_queue: str = "gpuflow"
    broker_key_prefix: str = ""  # isolates several deployments (or test runs) on one Redis
    cluster: str = "16x4"  # preset or NODESxGPUS for local mode's LiveCluster
    policy: str = "fifo"
    placement: str = "consolidated"
    # Local mode: how multi-node jobs share NICs and uplinks (controller.network.registry
    # names(): "dedicated", or an allocator whose link loads GET /cluster shows).
    network: str = "dedicated"
    time_scale: float = Field(default=1.0, gt=0)
    round_interval_s: float = Field(default=5.0, ge=0)
    sync_interval_s: float = Field(default=0.5, gt=0)  # wall seconds between ticker syncs
    token_cache_s: float = Field(default=5.0, ge=0)  # token -> user lookups kept; 0: none
    # Request bodies (api.http.guard): larger ones are a 413 before they are read. Trace
    # uploads have their own limit (api.routes.traces.MAX_TRACE_BYTES).
    max_body_bytes: int = Field(default=4 * 2**20, ge=1024)
    # One tenant cannot starve the others (api.routes.replays): replays queued or running
    # per tenant (more is a 429), and replays one sweep may fan out to (more is a 422).
    max_active_replays_per_tenant: int = Field(default=32, ge=1)
    max_sweep_replays: int = Field(default=64, ge=1)
    # GET /metrics takes an admin's token or this one (Prometheus: authorization.credentials).
    metrics_token: SecretStr | None = None
    # Time limits on every database call (api.store.db); a call over its limit is a 503.
    # PostgreSQL cancels a statement after db_statement_timeout_s and a lock wait after
    # db_lock_timeout_s (SQLite: its busy timeout); a server that does not answer at all
    # (hung, stopped) is given up client-side db_hang_grace_s after the statement limit.
    db_statement_timeout_s: float = Field(default=30.0, gt=0, le=86400)
    db_lock_timeout_s: float = Field(default=10.0, gt=0, le=86400)
    db_hang_grace_s: float = Field(default=5.0, gt=0, le=3600)
    db_connect_timeout_s: int = Field(default=5, ge=2, le=3600)  # libpq: whole seconds, >= 2
    db_pool_timeout_s: float = Field(default=10.0, gt=0, le=3600)  # waiting for a free connection
    # A running replay whose heartbeat is older than this lost its worker and is failed
    # (api.replays.reconcile); a heartbeat is written each second of a replay's progress.
    replay_stale_after_s: float = Field(default=600.0, ge=1)
    # Replays running or sent to a runner at once (api.replays.dispatch): in-process, the
    # API's replay threads; with a broker, what is sent to it at a time, to be set to the
    # workers' slots in all (sum of their --concurrency). The rest wait in the database
    # and each free slot goes to the next tenant in turn.
    replay_concurrency: int = Field(default=2, ge=1, le=256)
    # Uploaded traces read at once, each in a child process (api.replays.trace_check); more wait.
    trace_check_concurrency: int = Field(default=2, ge=1, le=64)
    # A replay sent and not started within replay_start_timeout_s lost its task: sent again,
    # or failed once sent replay_max_dispatches times; checked every
    # replay_reconcile_every_s (api.replays.reconcile), so a lost replay ends or runs within
    # about replay_max_dispatches x (start timeout + check period).
    replay_start_timeout_s: float = Field(default=60.0, gt=0, le=86400)
    replay_max_dispatches: int = Field(default=3, ge=1, le=100)
    replay_reconcile_every_s: float = Field(default=30.0, gt=0, le=3600)
    live: bool = True  # run the LiveCluster and its ticker (off for API-only tests)
    # Cluster mode (api.cluster_mode.backend): jobs become DLJobs on this Kubernetes cluster instead
    # of running on the LiveCluster. Either a kubeconfig or the pod's service account.
    kubeconfig: str | None = Field(default=None, description="kubeconfig path: cluster mode")
    kube_context: str | None = None
    in_cluster: bool = Field(default=False, description="cluster mode, service account")
    kube_namespace: str = Field(default="default", description="where REST jobs' DLJobs go")
    kube_image: str | None = Field(
        default=None, description="cluster mode: the worker image of jobs that name none"
    )
    kube_watch_timeout_s: int = Field(default=60, ge=1)
    # Cluster mode: a reporting job's DLJob status.train is written at most this often
    # (api.cluster_mode.train_status); the last report of a burst is written when the time is up.
    train_summary_interval_s: float = Field(default=5.0, ge=0)
    # The live cluster's history (api.samples), in the backend's clock (local mode: the
    # simulated one): a sample of every node, GPU and tenant each history_sample_s, kept
    # as taken for history_full_s, then merged into bins of history_coarse_s, kept for
    # history_retention_s. A 1,000-node cluster's cost: docs/benchmarks.md, "History".
    history: bool = True
    history_sample_s: float = Field(default=30.0, ge=1, le=3600)
    history_full_s: float = Field(default=3600.0, ge=0, le=30 * 86400)
    history_coarse_s: float = Field(default=300.0, ge=1, le=86400)
    history_retention_s: float = Field(default=7 * 86400.0, ge=60, le=366 * 86400)

    @property
    def cluster_mode(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster

    def sqlalchemy_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # A bare postgresql:// URL means psycopg 3, the driver we depend on.
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
            return url
        return f"sqlite:///{self.data_dir / 'gpuflow.db'}"
