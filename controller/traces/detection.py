"""Telling a trace's format from its file: the suffix, else the first non-blank line.

Called by `load_trace` when no format is given. A `.json` file (or one starting with
`[`) is `philly-json`; a `.trace` file (or a tab-separated line of a Gavel width) is
`gavel`; otherwise the first line is read as a CSV header and matched against each
format's characteristic columns (the headerless PAI task table is known by its ten
columns and their numbers). No match, or more than one, raises `UnknownFormatError`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.traces.formats import (
    adaptdl,
    alibaba,
    canonical,
    elasticflow,
    gavel,
    helios,
    philly,
    tiresias,
)
from controller.traces.registry import FORMATS
from controller.traces.trace import TraceError, UnknownFormatError

_HEAD_CHARS = 64 * 1024

Rule = Callable[[Sequence[str]], bool]


def _has(*columns: str) -> Rule:
    wanted = set(columns)
    return lambda names: wanted.issubset(names)


def _number_or_empty(cell: str) -> bool:
    if not cell.strip():
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _pai_task_rows(names: Sequence[str]) -> bool:
    if names[:1] == ["job_name"]:
        return "plan_gpu" in names
    return (
        len(names) == len(alibaba.PAI_TASK_COLUMNS)
        and bool(names[2].strip())
        and all(_number_or_empty(cell) for cell in [names[2], *names[4:9]])
    )


_TRACE_RULES: tuple[tuple[str, Rule], ...] = (
    (canonical.FORMAT, _has("job_id", "submit_s", "num_gpus")),
    (philly.CSV_FORMAT, _has("timestamp", "duration", "num_gpus")),
    (adaptdl.FORMAT, _has("name", "time", "application", "num_replicas")),
    # ElasticFlow's traces have Tiresias' columns too, and a deadline (`ddl`).
    (
        tiresias.FORMAT,
        lambda names: _has("job_id", "num_gpu", "submit_time")(names) and "ddl" not in names,
    ),
    (elasticflow.FORMAT, _has(*elasticflow.COLUMNS)),
    (helios.FORMAT, _has("job_id", "gpu_num", "submit_time")),
    (alibaba.OPENB_FORMAT, _has("name", "num_gpu", "gpu_milli", "creation_time")),
    (alibaba.PAI_FORMAT, _pai_task_rows),
)


def _pai_job_rows(names: Sequence[str]) -> bool:
    if names[:2] == ["job_name", "inst_id"]:
        return True
    return len(names) == len(alibaba.PAI_JOB_COLUMNS) and all(
        _number_or_empty(cell) for cell in names[4:6]
    )


# Files that are not job traces but are easily mistaken for one, with what they are.
_OTHER_FILES: tuple[tuple[Rule, str], ...] = (
    (_has("sn", "gpu", "model"), "an openb node list (a cluster spec; see load_openb_nodes)"),
    (_has("num_switch", "num_node_p_switch"), "a Tiresias cluster spec, not a job trace"),
    (
        _pai_job_rows,
        "a PAI job table, which has no GPU counts (load pai_task_table.csv as alibaba-pai)",
    ),
)


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            head = handle.read(_HEAD_CHARS)
    except UnicodeDecodeError:
        raise UnknownFormatError(path, "not a UTF-8 text file", list(FORMATS)) from None
    except OSError as exc:
        raise TraceError(path, None, None, f"cannot read: {exc.strerror or exc}") from None
    for line in head.splitlines():
        if line.strip():
            return line
    raise TraceError(path, None, None, "empty file: no jobs")


def detect_format(path: str | Path) -> str:
    """The name (a key of `FORMATS`) of the format `path` is written in."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return philly.JSON_FORMAT
    if suffix == ".trace":
        return gavel.FORMAT
    line = _first_line(path)
    if line.lstrip().startswith("["):
        return philly.JSON_FORMAT
    if "\t" in line:
        if len(line.split("\t")) in gavel.LAYOUTS:
            return gavel.FORMAT
        raise UnknownFormatError(path, "tab-separated, but not a Gavel trace", list(FORMATS))
    names = [cell.strip().lower() for cell in next(csv.reader([line]))]
    matches = [name for name, rule in _TRACE_RULES if rule(names)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        reason = f"the header fits more than one format ({', '.join(matches)})"
        raise UnknownFormatError(path, reason, list(FORMATS))
    for rule, what in _OTHER_FILES:
        if rule(names):
            raise UnknownFormatError(path, f"this looks like {what}", list(FORMATS))
    raise UnknownFormatError(path, f"cannot tell the format from {line[:80]!r}", list(FORMATS))
