"""Microsoft Philly traces (Jeon et al., USENIX ATC 2019; github.com/msr-fiddle/philly-traces).

`philly-json` reads the release's `cluster_job_log`: a JSON list of jobs, each
`{jobid, user, vc, status, submitted_time, attempts: [{start_time, end_time,
detail: [{ip, gpus: [...]}]}]}` with times as "YYYY-MM-DD HH:MM:SS" (cluster-local
time, no zone). Per job:

- num_gpus is the first attempt's GPUs, summed over its servers (`detail`);
- duration_s is the sum of the attempts' run times (end - start). The gaps between
  attempts are time spent waiting to be rescheduled, which the replay simulates
  itself, so they are not counted as work (Tiresias and others take last end minus
  first start instead, which adds those gaps to the job's length);
- vc becomes the tenant, user the user; status is not used (killed and failed jobs
  held their GPUs too and are replayed like the others).

Skipped (counted in `Trace.skipped`): jobs with no attempts; jobs with an attempt
missing its start or end time (a logging gap, or the job was still running when the
log was cut); jobs whose first attempt lists no GPU; jobs whose attempts add up to
zero seconds. An attempt that ends before it starts is an error, and so is a time
that is not a finite number (NaN, Infinity, 1e309, an integer of hundreds of digits).

`philly-csv` reads the per-job CSV derived from that log and shipped with the AdaptDL
/Pollux simulator (`simulator/traces/philly.csv`): `timestamp,duration,num_gpus,
gpu_time,cluster`. `timestamp` is the submission time, as seconds or as a date-time
string (the Pollux file uses the latter); duration is in seconds; cluster (the VC)
becomes the tenant. Rows have no id, so jobs are named `philly-<row>` (0-based, counting
skipped rows). Rows with zero duration or zero GPUs are skipped.

Called through `load_trace`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.rows import (
    Collector,
    finite,
    job_errors,
    parse_time_s,
    read_table,
    shown,
)
from controller.traces.trace import Parsed, TraceError

JSON_FORMAT = "philly-json"
CSV_FORMAT = "philly-csv"

_SPACE = re.compile(r"\s*")

# Integers longer than this are read as floats: no time in seconds needs more digits,
# and Python refuses to convert integers of more than 4300 digits at all
# (sys.get_int_max_str_digits), which would escape as a bare ValueError.
_INT_DIGITS = 18


def _parse_int(text: str) -> int | float:
    """A JSON integer; a long one as a float, which may be infinite (then refused)."""
    if len(text.lstrip("-")) > _INT_DIGITS:
        return float(text)
    return int(text)


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return pos if match is None else match.end()


def _json_records(path: Path) -> Iterator[tuple[int, object]]:
    """The elements of a top-level JSON list with the line each one starts on."""
    text = path.read_text(encoding="utf-8-sig")
    decoder = json.JSONDecoder(parse_int=_parse_int)
    pos = _skip_space(text, 0)
    if pos == len(text) or text[pos] != "[":
        line = text.count("\n", 0, pos) + 1
        raise TraceError(path, line, None, "expected a JSON list of jobs")
    pos += 1
    line, counted = 1, 0
    while True:
        pos = _skip_space(text, pos)
        if pos < len(text) and text[pos] == "]":
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceError(path, exc.lineno, None, f"bad JSON: {exc.msg}") from None
        except RecursionError:
            raise TraceError(path, line, None, "bad JSON: nested too deeply") from None
        yield line, record
        pos = _skip_space(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] == "]":
            return
        else:
            line += text.count("\n", counted, pos)
            counted = pos
            raise TraceError(path, line, None, "bad JSON: expected ',' or ']' after a job")


def _time_s(value: object) -> float | None:
    """Seconds from a Philly time value; None when the log has none."""
    if value is None or value == "None" or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)  # integers are at most _INT_DIGITS long: no overflow
        if not math.isfinite(seconds):
            raise ValueError(f"not a finite number: {seconds!r}")
        return seconds
    if isinstance(value, str):
        parsed = parse_time_s(value)
        if parsed is not None:
            return parsed
        raise ValueError(f"not a time: {shown(value)}")
    raise ValueError(f"not a time: {shown(repr(value), quoted=False)}")


def _attempt_gpus(path: Path, line: int, attempt: dict[str, object]) -> int:
    detail = attempt.get("detail")
    if detail is None:
        return 0
    if not isinstance(detail, list):
        raise TraceError(path, line, "attempts[0].detail", "expected a list of servers")
    count = 0
    for server in detail:
        gpus = server.get("gpus") if isinstance(server, dict) else None
        if not isinstance(gpus, list):
            raise TraceError(path, line, "attempts[0].detail.gpus", "expected a list of GPUs")
        count += len(gpus)
    return count


def _philly_job(path: Path, line: int, record: object) -> JobSpec | None:
    """The job a `cluster_job_log` record describes, or None if it is to be skipped."""
    if not isinstance(record, dict):
        raise TraceError(path, line, None, "expected a JSON object per job")
    job_id = record.get("jobid")
    if not isinstance(job_id, str) or not job_id:
        raise TraceError(path, line, "jobid", "missing or not a string")
    try:
        submit_s = _time_s(record.get("submitted_time"))
    except ValueError as exc:
        raise TraceError(path, line, "submitted_time", str(exc)) from None
    if submit_s is None:
        raise TraceError(path, line, "submitted_time", "missing value")
    attempts = record.get("attempts")
    if attempts is None or attempts == []:
        return None
    if not isinstance(attempts, list):
        raise TraceError(path, line, "attempts", "expected a list")
    run_s = 0.0
    for index, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise TraceError(path, line, f"attempts[{index}]", "expected an object")
        times: list[float] = []
        for key in ("start_time", "end_time"):
            try:
                value = _time_s(attempt.get(key))
            except ValueError as exc:
                raise TraceError(path, line, f"attempts[{index}].{key}", str(exc)) from None
            if value is None:
                return None
            times.append(value)
        start_s, end_s = times
        if end_s < start_s:
            raise TraceError(
                path, line, f"attempts[{index}].end_time", "attempt ends before it starts"
            )
        run_s = finite(path, line, f"attempts[{index}].end_time", run_s + end_s - start_s)
    num_gpus = _attempt_gpus(path, line, attempts[0])
    if num_gpus == 0 or run_s == 0:
        return None
    vc, user = record.get("vc"), record.get("user")
    with job_errors(path, line):
        return JobSpec(
            job_id=job_id,
            submit_s=submit_s,
            num_gpus=num_gpus,
            duration_s=run_s,
            tenant=vc if isinstance(vc, str) and vc else "default",
            user=user if isinstance(user, str) else "",
        )


def load_philly_json(path: Path) -> Parsed:
    jobs = Collector(path)
    for line, record in _json_records(path):
        job = _philly_job(path, line, record)
        if job is None:
            jobs.skip()
        else:
            jobs.add(job, line)
    return jobs.result()


def load_philly_csv(path: Path) -> Parsed:
    jobs = Collector(path)
    rows = read_table(path, required=("timestamp", "duration", "num_gpus"))
    for index, row in enumerate(rows):
        submit_s = row.time_s("timestamp")
        duration_s = row.number("duration", minimum=0.0)
        num_gpus = row.integer("num_gpus", minimum=0)
        if duration_s == 0 or num_gpus == 0:
            jobs.skip()
            continue
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=f"philly-{index}",
                submit_s=submit_s,
                num_gpus=num_gpus,
                duration_s=duration_s,
                tenant=row.text("cluster", "default"),
            )
        jobs.add(job, row.line)
    return jobs.result()
