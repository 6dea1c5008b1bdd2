"""SenseTime Helios job traces (`helios`): the `cluster_log.csv` of each cluster.

Helios (Hu et al., SC 2021; github.com/S-Lab-System-Group/HeliosData) logs one job
per row: `job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,
start_time,end_time,duration,queue`, times as "YYYY-MM-DD HH:MM:SS" and duration in
seconds. Only job_id, gpu_num and submit_time are required, with either duration or
start_time and end_time (duration wins when both are there). vc becomes the tenant,
user the user; the anonymised jobname, state and the CPU columns are not used.

Skipped (counted in `Trace.skipped`): CPU-only jobs (gpu_num 0) and jobs that never
ran (zero duration, or no start or end time). A negative duration is an error.
Called through `load_trace`.
"""

from __future__ import annotations

from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.rows import Collector, Row, job_errors, read_table, span_s
from controller.traces.trace import Parsed

FORMAT = "helios"


def _duration_s(row: Row) -> float | None:
    """Seconds the job ran; None when the row does not say (it never started)."""
    if row.has("duration"):
        return row.number("duration", minimum=0.0)
    start_s = row.optional_time_s("start_time")
    end_s = row.optional_time_s("end_time")
    if start_s is None or end_s is None:
        return None
    return span_s(row.path, row.line, "end_time", start_s, end_s, "job ends before it starts")


def load_helios(path: Path) -> Parsed:
    jobs = Collector(path)
    rows = read_table(
        path, required=("job_id", "gpu_num", "submit_time"), any_of=("duration", "end_time")
    )
    for row in rows:
        job_id = row.required_text("job_id")
        num_gpus = row.integer("gpu_num", minimum=0)
        submit_s = row.time_s("submit_time")
        duration_s = _duration_s(row)
        if num_gpus == 0 or not duration_s:
            jobs.skip()
            continue
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=job_id,
                submit_s=submit_s,
                num_gpus=num_gpus,
                duration_s=duration_s,
                tenant=row.text("vc", "default"),
                user=row.text("user"),
            )
        jobs.add(job, row.line)
    return jobs.result()
