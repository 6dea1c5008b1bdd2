"""Job traces: reading the public GPU-cluster trace formats into `JobSpec`s.

The CLI and the experiment drivers call `load_trace(path, fmt)`; it finds the format
(`detect_format`) unless told, runs that format's loader (`FORMATS`, one module per
format family), and returns a `Trace` with the jobs sorted by (submit_s, job_id) and
shifted so the first arrives at 0. `synthetic.generate` makes Philly-like workloads
instead of reading one.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from controller.traces.detection import detect_format
from controller.traces.formats.canonical import write_canonical
from controller.traces.registry import FORMATS, Loader
from controller.traces.trace import JOB_LIMIT, Trace, TraceError, UnknownFormatError

__all__ = [
    "FORMATS",
    "Loader",
    "Trace",
    "TraceError",
    "UnknownFormatError",
    "detect_format",
    "load_trace",
    "write_canonical",
]

# The largest trace file read: 16 times the API's upload limit (api.routes.traces,
# sized for Philly's ~40 MiB job log), so that a mistaken path (a disk image, a log)
# is not read whole into memory.
MAX_TRACE_BYTES = 2**30


def _check_regular_file(path: Path) -> None:
    """Refuse a FIFO, device, directory or oversized file before anything opens it.

    Opening a FIFO blocks until a writer comes and /dev/zero never ends, so this is
    decided by stat alone.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TraceError(path, None, None, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TraceError(path, None, None, "not a regular file")
    if info.st_size > MAX_TRACE_BYTES:
        raise TraceError(path, None, None, f"larger than {MAX_TRACE_BYTES} bytes")


def load_trace(path: str | Path, fmt: str | None = None, max_jobs: int | None = None) -> Trace:
    """Read the trace at `path`, in format `fmt` (a key of `FORMATS`) or the detected one.

    Raises `TraceError` naming the file, line and field of the first bad record, when
    the trace holds no job or more than `max_jobs` (None: no limit), when two jobs
    share an id, or when `path` is not a regular file of at most `MAX_TRACE_BYTES`;
    `UnknownFormatError` when the format is not known or cannot be told from the file.
    """
    path = Path(path)
    _check_regular_file(path)
    if fmt is None:
        fmt = detect_format(path)
    loader = FORMATS.get(fmt)
    if loader is None:
        raise UnknownFormatError(path, f"unknown format {fmt!r}", list(FORMATS))
    limit = JOB_LIMIT.set(max_jobs)
    try:
        parsed = loader(path)
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, None, f"not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise TraceError(path, None, None, f"cannot read: {exc.strerror or exc}") from None
    finally:
        JOB_LIMIT.reset(limit)
    if not parsed.jobs:
        skipped = f" ({parsed.skipped} records skipped)" if parsed.skipped else ""
        raise TraceError(path, None, None, f"no jobs in the trace{skipped}")
    # Sorted and shifted in place: each job is replaced as it is shifted, so that the
    # trace's jobs are not all held twice (docs/benchmarks.md, "Trace loading memory").
    jobs = parsed.jobs
    jobs.sort(key=lambda job: (job.submit_s, job.job_id))
    start_s = jobs[0].submit_s
    if start_s != 0:
        for index, job in enumerate(jobs):
            jobs[index] = replace(job, submit_s=job.submit_s - start_s)
    return Trace(name=path.stem, fmt=fmt, jobs=tuple(jobs), skipped=parsed.skipped)
