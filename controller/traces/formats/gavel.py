"""Gavel `.trace` files (`gavel`): one tab-separated job per line, no header.

Gavel (Narayanan et al., OSDI 2020; github.com/stanford-futuredata/gavel) changed
the layout over time; the column count tells them apart, as read by the
`parse_trace` of each era (scheduler/utils.py and the scripts before it):

- 10: job_type, command, working_directory, num_steps_arg, needs_data_dir,
  total_steps, scale_factor, priority_weight, SLO, arrival_time (current);
- 9: the same without working_directory;
- 7: job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time,
  scale_factor (the `traces/msr/` files);
- 6: job_type, command, num_steps_arg, total_steps, arrival_time, scale_factor.

job_type looks like "ResNet-18 (batch size 64)": the part before " (batch size" is
kept verbatim as the model and the number becomes batch_size (job types without one,
such as "A3C" or "CycleGAN", leave it unset). total_steps becomes iterations,
scale_factor num_gpus, arrival_time (seconds) submit_s. priority_weight and SLO have no
place in `JobSpec` and are not read. Jobs are named `gavel-<n>` in file order
(0-based). A scale_factor of 0 is skipped, as Gavel's own 7-column reader did.
Called through `load_trace`.
"""

from __future__ import annotations

import re
from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.rows import Collector, job_errors, read_columns
from controller.traces.trace import Parsed

FORMAT = "gavel"

LAYOUTS: dict[int, tuple[str, ...]] = {
    10: (
        "job_type",
        "command",
        "working_directory",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ),
    9: (
        "job_type",
        "command",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "scale_factor",
        "priority_weight",
        "SLO",
        "arrival_time",
    ),
    7: (
        "job_type",
        "command",
        "num_steps_arg",
        "needs_data_dir",
        "total_steps",
        "arrival_time",
        "scale_factor",
    ),
    6: ("job_type", "command", "num_steps_arg", "total_steps", "arrival_time", "scale_factor"),
}

# A batch size of more digits than this is no batch size (and past 4300 digits Python
# refuses to convert it at all).
_BATCH_DIGITS = 9
_JOB_TYPE = re.compile(r"^(?P<model>.+?)\s*\(batch size (?P<batch_size>\d+)\)$")


def parse_job_type(job_type: str) -> tuple[str, int | None]:
    """("ResNet-18", 64) from "ResNet-18 (batch size 64)"; (job_type, None) otherwise.

    Raises ValueError when the batch size has more than `_BATCH_DIGITS` digits.
    """
    match = _JOB_TYPE.match(job_type.strip())
    if match is None:
        return job_type.strip(), None
    digits = match["batch_size"]
    if len(digits) > _BATCH_DIGITS:
        raise ValueError(f"batch size of {len(digits)} digits is too large")
    return match["model"], int(digits)


def load_gavel(path: Path) -> Parsed:
    jobs = Collector(path)
    for index, row in enumerate(read_columns(path, layouts=LAYOUTS, delimiter="\t")):
        job_type = row.required_text("job_type")
        try:
            model, batch_size = parse_job_type(job_type)
        except ValueError as exc:
            raise row.fail("job_type", str(exc)) from None
        scale_factor = row.integer("scale_factor", minimum=0)
        total_steps = row.number("total_steps", minimum=0.0)
        arrival_s = row.number("arrival_time", minimum=0.0)
        if scale_factor == 0:
            jobs.skip()
            continue
        if total_steps == 0:
            raise row.fail("total_steps", "must be > 0, got 0")
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=f"gavel-{index}",
                submit_s=arrival_s,
                num_gpus=scale_factor,
                model=model,
                iterations=total_steps,
                batch_size=batch_size,
            )
        jobs.add(job, row.line)
    return jobs.result()
