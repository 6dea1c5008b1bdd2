"""A job's deadline beside its predicted finish, for GET /jobs/{id} (issue 32, item 4).

Called by api/routes/jobs.py's `get_job`. The prediction is the what-if's
(controller.whatif.forecast, as POST /whatif computes it, api/whatif/forecast.py's `observe`
for the state), run under the active policy alone; a finished job's is its actual
finish. Times are seconds after submission on the job's clock (local mode's simulated
seconds, cluster mode's wall clock), as `deadline_s` is; `deadline` and
`predicted_finish` are those seconds added to the job's submission time.

A forecast replays every active job, so it is kept `MEMO_S` for the next request (the
job page polls) and runs under the what-if's one-at-a-time gate: while another
what-if runs, an active job has no prediction (`on_track` None), never a wait.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from api.backends import JobBackend
from api.settings import Settings
from api.store.models import Job
from api.whatif.forecast import Gate, observe
from controller.model import JobStatus
from controller.whatif import Limits, WhatIfTooLarge, forecast
from policies.registry import UnknownPolicyError

# How long one forecast answers for: about two polls of the job page (dashboard.js).
MEMO_S = 10.0
# One policy's replay for a page view: a fraction of POST /whatif's 30 s for all.
LIMITS = Limits(wall_budget_s=5.0)
REFUSED = "Refused"  # policies/elasticflow/__init__.py's reason code for a refused deadline job
_ENDED = {s.value for s in (JobStatus.FAILED, JobStatus.CANCELLED)}  # no finish to predict


@dataclass(frozen=True)
class Outlook:
    """What GET /jobs/{id} adds for a job with a deadline (all None without one)."""

    deadline: datetime | None = None
    predicted_finish_s: float | None = None  # seconds after submission
    predicted_finish: datetime | None = None
    on_track: bool | None = None


@dataclass(frozen=True)
class _Predicted:
    at_s: float  # monotonic time it was computed
    backend: JobBackend  # of the service that asked: a test's apps share this module
    policy: str | None
    after_submit_s: dict[str, float | None]  # job id -> predicted finish after submission


class Forecasts:
    """The active policy's latest forecast of every active job, kept MEMO_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: _Predicted | None = None

    def predicted(
        self, job_id: str, backend: JobBackend, settings: Settings, policy: str | None, gate: Gate
    ) -> dict[str, float | None] | None:
        """Job id -> predicted finish in seconds after submission (None: not within the
        forecast), from a forecast that took `job_id` in if the last one did not; None
        when no forecast could run now."""
        with self._lock:
            last = self._last
        fresh = last is not None and time.monotonic() - last.at_s < MEMO_S
        if (
            last is not None
            and fresh
            and last.backend is backend
            and last.policy == policy
            and job_id in last.after_submit_s
        ):
            return last.after_submit_s
        with gate as entered:
            if not entered:
                return None
            observed = observe(backend, settings, policy)
            try:
                result = forecast(observed.state, [observed.active_policy], LIMITS)
            except (WhatIfTooLarge, UnknownPolicyError):  # too many jobs; cluster mode
                return None  # before the API has read the operator's policy: "unknown"
        finish = result[observed.active_policy].finish_s
        submits = {j.spec.job_id: j.spec.submit_s for j in observed.state.jobs}
        now_s = observed.state.now_s
        after = {
            job_id: None if s is None else now_s + s - submits[job_id]
            for job_id, s in finish.items()
            if job_id in submits
        }
        with self._lock:
            self._last = _Predicted(time.monotonic(), backend, policy, after)
        return after


def needs_forecast(job: Job) -> bool:
    """Whether `outlook` reads a forecast for `job`: it has a deadline and is active."""
    return (
        job.deadline_s is not None
        and job.reason_code != REFUSED
        and job.status not in _ENDED
        and job.status != JobStatus.SUCCEEDED.value
    )


def outlook(job: Job, predicted: dict[str, float | None] | None) -> Outlook:
    """`job`'s deadline and predicted finish: its actual finish once it succeeded, never
    for a job refused or ended otherwise, else `predicted`'s (from `Forecasts`)."""
    if job.deadline_s is None:
        return Outlook()
    deadline = job.created_at + timedelta(seconds=job.deadline_s)
    if job.status == JobStatus.SUCCEEDED.value and job.finish_s is not None:
        finish_s: float | None = job.finish_s - (job.submit_s or 0.0)
    elif job.reason_code == REFUSED:
        return Outlook(deadline=deadline, on_track=False)
    elif job.status in _ENDED or predicted is None:
        return Outlook(deadline=deadline)
    else:
        finish_s = predicted.get(job.id)
    if finish_s is None:
        return Outlook(deadline=deadline)
    return Outlook(
        deadline=deadline,
        predicted_finish_s=finish_s,
        predicted_finish=job.created_at + timedelta(seconds=finish_s),
        on_track=finish_s <= job.deadline_s,
    )
