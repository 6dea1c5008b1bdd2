"""AdaptDL / Pollux / Sia workloads (`adaptdl`): `name,time,application,num_replicas,batch_size`.

These are the workload CSVs of the Pollux simulator (Qiao et al., OSDI 2021;
github.com/petuum/adaptdl, `simulator/workloads*/workload-N.csv`; the eight of the
paper's evaluation ship in `examples/traces/pollux/`), also used by Sia. `time` is the
submission in seconds, `application` the model (bert, cifar10, deepspeech2, imagenet,
ncf, yolov3), `num_replicas` the GPUs the job starts with and `batch_size` its total
batch size (the workload generator's "tuned" configuration). Extra columns are
ignored.

The workloads give no length: a Pollux job trains until it reaches its application's
target. Each job's work is that of the artifact's simulator: the application's
target progress (`MeasuredProfile.target_progress`), counted in steps at its smallest
validated batch (`work_batch`); a job run at its own larger batch is credited each
step's statistical gain (`MeasuredProfile.step_gain`), so every job of an application
has the same work and a large, inefficient batch takes more steps to do it. A row
without a batch size runs at the smallest validated batch.

The jobs are elastic, as in Pollux: min_gpus = 1, num_gpus = num_replicas, max_gpus =
`MAX_GPUS` (or num_replicas if that is larger). Called through `load_trace`.
"""

from __future__ import annotations

from pathlib import Path

from controller.model.catalog import MEASURED_APPS, measured_profile
from controller.model.job import JobSpec
from controller.traces.rows import Collector, job_errors, read_table
from controller.traces.trace import Parsed

FORMAT = "adaptdl"

# The Pollux simulator sizes its jobs for "a cluster of 16 nodes each with 4 GPUs"
# (simulator/applications.py), so no job can hold more than 64 GPUs.
MAX_GPUS = 64

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def load_adaptdl(path: Path) -> Parsed:
    jobs = Collector(path)
    for row in read_table(path, required=COLUMNS):
        name = row.required_text("name")
        application = row.text("application")
        measured = measured_profile(application)
        if measured is None:
            known = ", ".join(MEASURED_APPS)
            raise row.fail("application", f"unknown application {application!r} (known: {known})")
        num_replicas = row.integer("num_replicas", minimum=1)
        batch_size = row.optional_integer("batch_size", minimum=1)
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=name,
                submit_s=row.number("time", minimum=0.0),
                num_gpus=num_replicas,
                min_gpus=1,
                max_gpus=max(MAX_GPUS, num_replicas),
                model=application,
                iterations=measured.target_progress,
                batch_size=batch_size if batch_size is not None else measured.init_batch,
                work_batch=measured.init_batch,
            )
        jobs.add(job, row.line)
    return jobs.result()
