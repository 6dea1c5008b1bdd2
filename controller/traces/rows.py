"""Rows of a delimited trace file with their line numbers, and typed access to fields.

Used by the CSV and TSV format loaders in this package: every value read through a
`Row` that is missing or malformed raises a `TraceError` naming the file, the line
and the column. `Collector` gathers the loader's jobs and rejects duplicate ids.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.trace import JOB_LIMIT, Parsed, TraceError

# Cells are echoed in errors up to this many characters, so that a value of thousands
# of digits still gives a one-line message.
_SHOWN_CHARS = 40


def shown(raw: str, *, quoted: bool = True) -> str:
    """`raw` for an error message (quoted unless told not to), cut short when it is long."""
    if len(raw) <= _SHOWN_CHARS:
        return repr(raw) if quoted else raw
    head = repr(raw[:_SHOWN_CHARS]) if quoted else raw[:_SHOWN_CHARS]
    return f"{head}... ({len(raw)} characters)"


def finite(path: Path, line: int | None, field: str, value: float) -> float:
    """`value` itself, or a `TraceError` at this field when it is NaN or infinite.

    For numbers a loader computes (a sum, an end minus a start): finite operands can
    still overflow to infinity, which would make a replay run forever.
    """
    if not math.isfinite(value):
        raise TraceError(path, line, field, f"not a finite number: {value!r}")
    return value


def parse_time_s(text: str) -> float | None:
    """Seconds from a number, or from an ISO date-time (naive ones are taken as UTC).

    Traces record local wall-clock times without a zone; treating them all as UTC keeps
    the differences between them right (apart from a daylight-saving jump).
    Returns None when the text is neither.
    """
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def span_s(
    path: Path, line: int | None, field: str, start_s: float, end_s: float, backwards: str
) -> float:
    """Seconds from `start_s` to `end_s`: a `TraceError` at `field` (the end's) saying
    `backwards` when the end comes first, or when the difference is not finite."""
    if end_s < start_s:
        raise TraceError(path, line, field, backwards)
    return finite(path, line, field, end_s - start_s)


@dataclass(frozen=True, slots=True)
class Row:
    """One record of a trace file: its values by column name and where it came from."""

    path: Path
    line: int
    values: Mapping[str, str]

    def fail(self, field: str | None, message: str) -> TraceError:
        return TraceError(self.path, self.line, field, message)

    def text(self, field: str, default: str = "") -> str:
        value = self.values.get(field, "").strip()
        return value if value else default

    def required_text(self, field: str) -> str:
        """The cell's text; an error naming the field when it is empty."""
        value = self.text(field)
        if not value:
            raise self.fail(field, "missing value")
        return value

    def has(self, field: str) -> bool:
        return bool(self.text(field))

    def optional_number(self, field: str, *, minimum: float | None = None) -> float | None:
        raw = self.text(field)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(field, f"not a number: {shown(raw)}") from None
        if not math.isfinite(value):
            raise self.fail(field, f"not a finite number: {shown(raw)}")
        if minimum is not None and value < minimum:
            raise self.fail(field, f"must be >= {minimum:g}, got {shown(raw, quoted=False)}")
        return value

    def number(self, field: str, *, minimum: float | None = None) -> float:
        value = self.optional_number(field, minimum=minimum)
        if value is None:
            raise self.fail(field, "missing value")
        return value

    def optional_integer(self, field: str, *, minimum: int | None = None) -> int | None:
        value = self.optional_number(field)
        if value is None:
            return None
        if not value.is_integer():
            raise self.fail(field, f"not a whole number: {shown(self.text(field))}")
        if minimum is not None and value < minimum:
            raise self.fail(
                field, f"must be >= {minimum}, got {shown(self.text(field), quoted=False)}"
            )
        return int(value)

    def integer(self, field: str, *, minimum: int | None = None) -> int:
        value = self.optional_integer(field, minimum=minimum)
        if value is None:
            raise self.fail(field, "missing value")
        return value

    def optional_time_s(self, field: str) -> float | None:
        """Seconds from a number or a date-time string; None when the cell is empty."""
        raw = self.text(field)
        if not raw:
            return None
        value = parse_time_s(raw)
        if value is None:
            raise self.fail(field, f"not a time in seconds or a date-time: {shown(raw)}")
        return value

    def time_s(self, field: str) -> float:
        value = self.optional_time_s(field)
        if value is None:
            raise self.fail(field, "missing value")
        return value


def _records(handle: Iterator[str], path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """Non-blank records with the (last) line number each ends on."""
    # Gavel's commands carry quotes that are part of the command, not CSV quoting.
    if delimiter == "\t":
        reader = csv.reader(handle, delimiter=delimiter, quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(handle, delimiter=delimiter)
    try:
        for cells in reader:
            if any(cell.strip() for cell in cells):
                yield reader.line_num, cells
    except csv.Error as exc:
        raise TraceError(path, reader.line_num, None, str(exc)) from exc


def read_table(
    path: Path,
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
    any_of: Sequence[str] = (),
    allow_extra: bool = True,
    delimiter: str = ",",
) -> Iterator[Row]:
    """The rows of a file whose first non-blank line names the columns.

    Column names are matched without case or surrounding space. A missing required
    column, none of the `any_of` columns, a repeated column, or (unless `allow_extra`)
    an unknown one is an error on the header line.
    """
    with path.open(encoding="utf-8-sig", newline="") as handle:
        records = _records(handle, path, delimiter)
        first = next(records, None)
        if first is None:
            return
        header_line, header_cells = first
        header = [cell.strip().lower() for cell in header_cells]
        seen: set[str] = set()
        for name in header:
            if name in seen:
                raise TraceError(path, header_line, name, "column appears twice")
            seen.add(name)
        for name in required:
            if name not in seen:
                raise TraceError(path, header_line, name, "missing required column")
        if any_of and not seen.intersection(any_of):
            raise TraceError(
                path, header_line, any_of[0], f"need one of the columns {', '.join(any_of)}"
            )
        if not allow_extra:
            known = set(required) | set(optional) | set(any_of)
            for name in header:
                if name not in known:
                    raise TraceError(path, header_line, name, "unknown column")
        for line, cells in records:
            if len(cells) != len(header):
                raise TraceError(
                    path, line, None, f"expected {len(header)} columns, got {len(cells)}"
                )
            yield Row(path, line, dict(zip(header, cells, strict=True)))


def read_columns(
    path: Path,
    *,
    layouts: Mapping[int, Sequence[str]],
    delimiter: str,
    header_first_cell: str | None = None,
) -> Iterator[Row]:
    """The rows of a file without a header, naming the cells by the row's width.

    `layouts` maps a column count to the column names of that layout. When the first
    row's first cell is `header_first_cell` the row is taken as a header and skipped.
    """
    widths = " or ".join(str(width) for width in sorted(layouts))
    with path.open(encoding="utf-8-sig", newline="") as handle:
        for index, (line, cells) in enumerate(_records(handle, path, delimiter)):
            if index == 0 and cells[0].strip().lower() == header_first_cell:
                continue
            names = layouts.get(len(cells))
            if names is None:
                raise TraceError(path, line, None, f"expected {widths} columns, got {len(cells)}")
            yield Row(path, line, dict(zip(names, cells, strict=True)))


@contextmanager
def job_errors(path: Path, line: int | None) -> Iterator[None]:
    """Report a `JobSpec` the model rejects as a `TraceError` at this line."""
    try:
        yield
    except TraceError:
        raise
    except ValueError as exc:
        raise TraceError(path, line, None, str(exc)) from exc


class Collector:
    """Gathers a loader's jobs, refusing a job id seen before or one over the job limit
    (trace.JOB_LIMIT), and counts skipped records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped = 0
        self._jobs: list[JobSpec] = []
        self._first_line: dict[str, int | None] = {}

    def add(self, job: JobSpec, line: int | None) -> None:
        # The last guard: whichever way a loader computed them, a job's times and
        # work reach the replay finite.
        for field in ("submit_s", "duration_s", "iterations"):
            value = getattr(job, field)
            if value is not None:
                finite(self.path, line, field, value)
        if job.job_id in self._first_line:
            first = self._first_line[job.job_id]
            where = "" if first is None else f" (first on line {first})"
            raise TraceError(
                self.path, line, "job_id", f"duplicate job id {shown(job.job_id)}{where}"
            )
        limit = JOB_LIMIT.get()
        if limit is not None and len(self._jobs) >= limit:
            raise TraceError(self.path, line, None, f"more than {limit} jobs (the limit)")
        self._first_line[job.job_id] = line
        self._jobs.append(job)

    def skip(self) -> None:
        self.skipped += 1

    def result(self) -> Parsed:
        return Parsed(self._jobs, self.skipped)
