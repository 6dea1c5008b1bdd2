"""Sends a job's metrics to the API from a background thread, never holding up a step.

Called by `gpuflow.train.session` on rank 0 (one report per job, not per rank). The
wire format is `api/schemas/jobs.py` `JobMetricsCreate`: POST
`{api_url}/jobs/{job_id}/metrics`, header `X-Job-Token`, body
`{"metrics": [{"name", "value", "step"}]}`. `add` only appends to a bounded queue; a
full queue drops its oldest entries and counts them; the thread sends in batches with
a timeout and backs off exponentially while the API is away; `close` flushes what it
can within a deadline.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass

import httpx

from gpuflow.train.placement import ReportTarget

log = logging.getLogger(__name__)

# The metric names the API and the scheduler read (a contract with the API's
# summariser: keep exactly).
LOSS = "loss"
SAMPLES_PER_S = "samples_per_s"  # global samples per second over the reporting window
STEP_TIME_S = "step_time_s"
BATCH_SIZE = "batch_size"  # global batch in use
GPUS = "gpus"  # the job's allocation in GPUs
GRAD_SQR = "grad_sqr"  # Pollux's |G|^2 estimate (gradstats.py)
GRAD_VAR = "grad_var"  # Pollux's tr(Sigma) estimate, per sample (gradstats.py)
# Steps in one pass over the job's data at the batch in use, when the script gives its
# data's size: Optimus's convergence test is a loss drop per epoch.
EPOCH_STEPS = "epoch_steps"

# JobMetricsCreate's max_length in api/schemas/jobs.py.
MAX_PER_REQUEST = 1000
# At a few reports per second a 10,000-entry queue holds minutes of an API outage in
# a few MB; older figures are the least useful to a scheduler, so they go first.
QUEUE_LIMIT = 10_000
# A report is worth little after a few seconds: short timeouts keep close() bounded.
TIMEOUT_S = 5.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
CLOSE_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    step: int


class Reporter:
    """Queue of metrics and the thread that posts them; `target=None` discards all."""

    def __init__(
        self,
        target: ReportTarget | None,
        *,
        queue_limit: int = QUEUE_LIMIT,
        timeout_s: float = TIMEOUT_S,
        backoff_first_s: float = BACKOFF_FIRST_S,
        backoff_max_s: float = BACKOFF_MAX_S,
    ) -> None:
        self._target = target
        self._queue: collections.deque[Metric] = collections.deque()
        self._limit = queue_limit
        self._timeout_s = timeout_s
        self._backoff_first_s = backoff_first_s
        self._backoff_max_s = backoff_max_s
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = math.inf
        self.dropped = 0  # entries dropped because the queue was full
        self.sent = 0
        self.failures = 0  # requests that failed (each retried later)
        self._thread: threading.Thread | None = None
        if target is not None:
            self._thread = threading.Thread(target=self._run, name="gpuflow-reporter", daemon=True)
            self._thread.start()

    def add(self, name: str, value: float, step: int) -> None:
        """Queue one figure; O(1), never blocks on the network. Non-finite values are
        skipped (the API takes only finite floats)."""
        if self._target is None or not math.isfinite(value):
            return
        with self._cond:
            if len(self._queue) >= self._limit:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(Metric(name, float(value), int(step)))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self, deadline_s: float = CLOSE_DEADLINE_S) -> None:
        """Send what is queued (trying until `deadline_s`), then stop the thread."""
        if self._thread is None:
            return
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + deadline_s
            self._cond.notify()
        self._thread.join(deadline_s + self._timeout_s)
        if self.pending() or self.dropped:
            log.warning(
                "metrics: %d not sent at close, %d dropped (queue full)",
                self.pending(),
                self.dropped,
            )

    def _take(self) -> list[Metric] | None:
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if not self._queue:
                return None
            return [self._queue.popleft() for _ in range(min(MAX_PER_REQUEST, len(self._queue)))]

    def _put_back(self, batch: list[Metric]) -> None:
        with self._cond:
            room = self._limit - len(self._queue)
            keep = batch[-room:] if room > 0 else []
            self.dropped += len(batch) - len(keep)
            self._queue.extendleft(reversed(keep))

    def _sleep(self, seconds: float) -> bool:
        """Back off for `seconds` (cut short by the close deadline); False when the
        deadline has passed."""
        with self._cond:
            end = min(time.monotonic() + seconds, self._deadline)
            while (left := end - time.monotonic()) > 0:
                self._cond.wait(left)
                end = min(end, self._deadline)
            return time.monotonic() < self._deadline

    def _run(self) -> None:
        assert self._target is not None
        target = self._target
        backoff = self._backoff_first_s
        headers = {"X-Job-Token": target.token}
        with httpx.Client(timeout=self._timeout_s) as client:
            while (batch := self._take()) is not None:
                body = {
                    "metrics": [{"name": m.name, "value": m.value, "step": m.step} for m in batch]
                }
                try:
                    resp = client.post(target.metrics_url, json=body, headers=headers)
                    ok = resp.status_code < 500
                    if 400 <= resp.status_code < 500:
                        # A refused batch will be refused again: log it and move on.
                        log.warning("metrics refused (%d): %s", resp.status_code, resp.text[:200])
                except httpx.HTTPError as exc:
                    ok = False
                    log.debug("metrics POST failed: %s", exc)
                if ok:
                    self.sent += len(batch)
                    backoff = self._backoff_first_s
                    continue
                self.failures += 1
                self._put_back(batch)
                if not self._sleep(backoff):
                    return
                backoff = min(2 * backoff, self._backoff_max_s)
