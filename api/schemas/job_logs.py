"""A job's worker logs: JobLogsPublic, GET /api/v1/jobs/{id}/logs's answer
(api/routes/job_logs.py), built by the backend (api/cluster_mode/worker_logs.py in cluster mode)."""

from __future__ import annotations

from pydantic import BaseModel, Field

MAX_TAIL_LINES = 10_000  # a page of the dashboard; `kubectl logs` for more
DEFAULT_TAIL_LINES = 200
MAX_LOG_BYTES = 1024 * 1024  # what one answer carries at most: the tail's first MiB


class JobLogsPublic(BaseModel):
    job_id: str
    worker: int = Field(description="the worker's rank in the job's latest attempt")
    workers: int = Field(description="how many workers the latest attempt has (0: none now)")
    pod: str | None = Field(default=None, description="the worker's pod, in cluster mode")
    node: str | None = None
    phase: str | None = Field(default=None, description="the pod's phase")
    lines: list[str] = Field(description="the last lines of its stdout and stderr, oldest first")
    note: str | None = Field(
        default=None,
        description="why there are no lines (none yet, none kept, or none in this mode)",
    )
