"""The loaded trace and the errors a trace file can raise.

Every format loader returns a `Parsed`; `controller.traces.load_trace` turns it into a
`Trace` (sorted, shifted to start at 0). Loaders raise `TraceError` naming the file,
line and field of the first bad value they meet.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from controller.model.job import JobSpec

# A field name or message is cut to this many characters: both can echo the file (a
# column name, a job id of thousands of characters), and the error stays one short line.
MAX_SHOWN_CHARS = 300

# The most jobs the trace being loaded may hold (None: no limit); set by load_trace for
# the duration of one load and enforced by rows.Collector as each job is added, so a
# trace of millions of small rows is refused at the first job over, not after all of
# them are held (the API's uploads: api/routes/traces.py MAX_TRACE_JOBS).
JOB_LIMIT: ContextVar[int | None] = ContextVar("JOB_LIMIT", default=None)


def _one_line(text: str) -> str:
    """`text` on one line (line breaks and other spacing as single spaces), cut short."""
    line = " ".join(text.split())
    if len(line) <= MAX_SHOWN_CHARS:
        return line
    return f"{line[:MAX_SHOWN_CHARS]}... ({len(line)} characters)"


class TraceError(ValueError):
    """A trace file that cannot be read as the format it claims to be.

    `line` is 1-based (header problems are line 1) and `field` is the column or key at
    fault; either is None when the problem is not tied to one. The message is always
    one line of bounded length, whatever the file held.
    """

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        field: str | None,
        message: str,
    ) -> None:
        field = None if field is None else _one_line(field)
        message = _one_line(message)
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = str(path) if line is None else f"{path}:{line}"
        what = message if field is None else f"field '{field}': {message}"
        super().__init__(f"{where}: {what}")


class UnknownFormatError(TraceError):
    """The format could not be told from the file, or the name given is not known."""

    def __init__(self, path: str | Path, reason: str, known: Sequence[str]) -> None:
        self.known = tuple(known)
        super().__init__(
            path,
            None,
            None,
            f"{reason}; known formats: {', '.join(self.known)} (pass --format NAME)",
        )


@dataclass(frozen=True, slots=True)
class Trace:
    """A workload ready to replay: jobs sorted by (submit_s, job_id), the first at 0.

    `skipped` counts the records the loader left out because they never ran or asked
    for no GPU (which records each format skips is in its module docstring).
    """

    name: str
    fmt: str
    jobs: tuple[JobSpec, ...]
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a format loader read: its jobs in file order and how many it skipped."""

    jobs: list[JobSpec] = field(default_factory=list)
    skipped: int = 0
