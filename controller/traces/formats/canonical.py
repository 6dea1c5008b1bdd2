"""gpuflow's own trace format (`gpuflow`): one CSV row per `JobSpec`.

Header: job_id,submit_s,num_gpus,min_gpus,max_gpus,model,duration_s,iterations,
batch_size,work_batch,gpu_mem_mib,tenant,user,priority,precision,gpu_util,deadline_s
(work_batch: the batch the iterations are counted at, see `JobSpec`; precision: what
the job trains in, tf32, bf16, fp16 or fp32, controller.model.precision, default tf32;
gpu_util: the job's own GPU utilisation alone, in (0, 1], where known, else its
model's catalogue figure; deadline_s: seconds after submit_s by which the job must
finish, empty for a best-effort job). job_id, submit_s, num_gpus and at least one of
duration_s / iterations are required; an empty cell takes the `JobSpec` default.
Columns may come in any order; an unknown column is an error (it is most likely a
misspelt one). `write_canonical` writes
the same form, so converted traces and generated workloads can be saved and replayed.
Called through `load_trace`.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from controller.model.job import JobSpec
from controller.model.precision import DEFAULT_PRECISION, parse_precision
from controller.traces.rows import Collector, Row, job_errors, read_table
from controller.traces.trace import Parsed

FORMAT = "gpuflow"

COLUMNS = (
    "job_id",
    "submit_s",
    "num_gpus",
    "min_gpus",
    "max_gpus",
    "model",
    "duration_s",
    "iterations",
    "batch_size",
    "work_batch",
    "gpu_mem_mib",
    "tenant",
    "user",
    "priority",
    "precision",
    "gpu_util",
    "deadline_s",
)
REQUIRED = ("job_id", "submit_s", "num_gpus")


def load_canonical(path: Path) -> Parsed:
    jobs = Collector(path)
    rows = read_table(
        path,
        required=REQUIRED,
        any_of=("duration_s", "iterations"),
        optional=COLUMNS,
        allow_extra=False,
    )
    for row in rows:
        job_id = row.required_text("job_id")
        num_gpus = row.integer("num_gpus", minimum=1)
        min_gpus = row.optional_integer("min_gpus", minimum=1) or 0
        max_gpus = row.optional_integer("max_gpus", minimum=1) or 0
        if min_gpus > num_gpus:
            raise row.fail("min_gpus", f"{min_gpus} is more than num_gpus {num_gpus}")
        if max_gpus and max_gpus < num_gpus:
            raise row.fail("max_gpus", f"{max_gpus} is less than num_gpus {num_gpus}")
        duration_s = row.optional_number("duration_s")
        iterations = row.optional_number("iterations")
        if duration_s is None and iterations is None:
            raise row.fail("duration_s", "give duration_s or iterations")
        if duration_s is not None and duration_s <= 0:
            raise row.fail("duration_s", f"must be > 0, got {row.text('duration_s')}")
        if iterations is not None and iterations <= 0:
            raise row.fail("iterations", f"must be > 0, got {row.text('iterations')}")
        precision = DEFAULT_PRECISION
        if row.text("precision"):
            try:
                precision = parse_precision(row.text("precision"))
            except ValueError as e:
                raise row.fail("precision", str(e)) from None
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=job_id,
                submit_s=row.number("submit_s", minimum=0.0),
                num_gpus=num_gpus,
                min_gpus=min_gpus,
                max_gpus=max_gpus,
                model=row.text("model"),
                duration_s=duration_s,
                iterations=iterations,
                batch_size=row.optional_integer("batch_size", minimum=1),
                work_batch=row.optional_integer("work_batch", minimum=1),
                gpu_mem_mib=row.optional_integer("gpu_mem_mib", minimum=1),
                tenant=row.text("tenant", "default"),
                user=row.text("user"),
                priority=row.optional_integer("priority") or 0,
                precision=precision,
                gpu_util=_gpu_util(row),
                deadline_s=_deadline_s(row),
            )
        jobs.add(job, row.line)
    return jobs.result()


def _gpu_util(row: Row) -> float | None:
    util = row.optional_number("gpu_util")
    if util is not None and not 0.0 < util <= 1.0:
        raise row.fail("gpu_util", f"must be in (0, 1], got {row.text('gpu_util')}")
    return util


def _deadline_s(row: Row) -> float | None:
    deadline_s = row.optional_number("deadline_s")
    if deadline_s is not None and deadline_s <= 0:
        raise row.fail("deadline_s", f"must be > 0, got {row.text('deadline_s')}")
    return deadline_s


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() else repr(value)
    return str(value)


def write_canonical(path: str | Path, jobs: Iterable[JobSpec]) -> None:
    """Write `jobs` in the `gpuflow` format; `load_canonical` reads back equal jobs."""
    with Path(path).open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for job in jobs:
            writer.writerow(_cell(getattr(job, column)) for column in COLUMNS)
