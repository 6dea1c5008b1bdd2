"""Tiresias simulator job traces (`tiresias`): `job_id,num_gpu,submit_time,iterations,
model_name,duration,interval`.

The `*_job.csv` files of the Tiresias simulator (Gu et al., NSDI 2019;
github.com/SymbioticLab/Tiresias, `simulator/60_job.csv`). submit_time and duration
are in seconds; iterations is the job's length in iterations; interval (the gap
since the previous submission) is not needed and is ignored, as are extra columns.
A job keeps whichever of iterations and duration the file gives (a 0 or empty cell
means "not given"); it needs at least one. Cluster specs (`cluster_spec.csv`) are not
read here. Called through `load_trace`.
"""

from __future__ import annotations

from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.rows import Collector, job_errors, read_table
from controller.traces.trace import Parsed

FORMAT = "tiresias"


def load_tiresias(path: Path) -> Parsed:
    jobs = Collector(path)
    rows = read_table(
        path, required=("job_id", "num_gpu", "submit_time"), any_of=("duration", "iterations")
    )
    for row in rows:
        job_id = row.required_text("job_id")
        iterations = row.optional_number("iterations", minimum=0.0) or None
        duration_s = row.optional_number("duration", minimum=0.0) or None
        if iterations is None and duration_s is None:
            raise row.fail("duration", "give a duration or iterations above 0")
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=job_id,
                submit_s=row.number("submit_time", minimum=0.0),
                num_gpus=row.integer("num_gpu", minimum=1),
                model=row.text("model_name"),
                duration_s=duration_s,
                iterations=iterations,
            )
        jobs.add(job, row.line)
    return jobs.result()
