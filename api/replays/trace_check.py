"""Trace files read and checked in child processes, not in the API's.

Created by api.app (`create_app`) as app.state.trace_checker; called by
api.routes.traces for POST /traces and POST /traces/validate. Reading a trace holds
the CPU for seconds (a 100,000-job CSV: about 5 s), and in a thread of the API it
would hold the interpreter's lock against every request the API answers, one
tenant's upload slowing every other tenant's submissions (as replays did before
api.replays.executor). In a spawned child it shares the cores through the kernel's
scheduler instead; the request's thread only waits, holding no lock. Only the
trace's summary comes back (a TraceSummary, or the TraceError's fields).

At most `settings.trace_check_concurrency` traces are read at once; the children are
started at the first upload and kept. A child that dies reading a file (killed, out
of memory) is reported as TraceCheckFailed and the pool is started again.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

from controller.traces import TraceError, load_trace

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """What the API stores and answers about a valid trace."""

    name: str
    fmt: str
    jobs: int
    skipped: int
    gpus_max: int
    span_s: float


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A TraceError's fields (sent back as data: its constructor is not pickle's)."""

    line: int | None
    field: str | None
    message: str


class TraceCheckFailed(Exception):
    """The child reading the trace died before it answered."""


class TraceChecker:
    """A pool of `processes` spawned children that read traces."""

    def __init__(self, processes: int) -> None:
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded API
        self._processes = processes
        self._lock = Lock()
        self._pool: ProcessPoolExecutor | None = None

    def _current(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self._processes, mp_context=self._context)
            return self._pool

    def check(self, path: Path, fmt: str | None, max_jobs: int) -> TraceSummary:
        """The trace at `path` read as `fmt` (None: detected); TraceError if it is not a
        readable trace of at most `max_jobs` jobs. Blocks the calling thread only."""
        pool = self._current()
        try:
            answer = pool.submit(_summarise, str(path), fmt, max_jobs).result()
        except BrokenProcessPool:
            log.warning("a trace-reading process died on %s; started again", path.name)
            with self._lock:
                if self._pool is pool:
                    pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
            raise TraceCheckFailed(f"the process reading {path.name} died") from None
        if isinstance(answer, _Refusal):
            raise TraceError(path, answer.line, answer.field, answer.message)
        return answer

    def stop(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None


def _summarise(path: str, fmt: str | None, max_jobs: int) -> TraceSummary | _Refusal:
    """In a child: read the trace and keep only its summary."""
    try:
        trace = load_trace(Path(path), fmt, max_jobs=max_jobs)
    except TraceError as exc:
        return _Refusal(exc.line, exc.field, exc.message)
    return TraceSummary(
        name=trace.name,
        fmt=trace.fmt,
        jobs=len(trace.jobs),
        skipped=trace.skipped,
        gpus_max=max(j.num_gpus for j in trace.jobs),
        span_s=trace.jobs[-1].submit_s - trace.jobs[0].submit_s,
    )
