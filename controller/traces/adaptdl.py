"""AdaptDL / Pollux / Sia workloads (`adaptdl`): `name,time,application,num_replicas,batch_size`.

These are the workload CSVs of the Pollux simulator (Qiao et al., OSDI 2021;
github.com/petuum/adaptdl, `simulator/workloads*/workload-N.csv`), also used by Sia.
`time` is the submission in seconds, `application` the model (bert, cifar10,
deepspeech2, imagenet, ncf, yolov3), `num_replicas` the GPUs the job starts with and
`batch_size` its total batch size. Extra columns are ignored.

The workloads give no length: a Pollux job trains until it reaches its target
metric. Each job gets a length from `REFERENCE_GPU_HOURS` instead, at linear
scaling: duration_s = gpu_hours * 3600 / num_replicas. The hours are the middle of
the size class the Pollux workload generator (`simulator/workload.py`) draws each
application from by the Philly job's GPU time: cifar10 and ncf < 1 GPU-hour,
deepspeech2 and bert 1-10, yolov3 10-100, imagenet >= 100 (taken as 100-1000, the
paper's XLarge class); the middle is 0.5 for the first class and the geometric mean of
the bounds for the others. A caller with better numbers passes its own mapping to
`load_adaptdl(path, gpu_hours=...)`.

The jobs are elastic, as in Pollux: min_gpus = 1, num_gpus = num_replicas, max_gpus =
`MAX_GPUS` (or num_replicas if that is larger). Called through `load_trace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from controller.model.job import JobSpec
from controller.traces.rows import Collector, job_errors, read_table
from controller.traces.trace import Parsed

FORMAT = "adaptdl"

REFERENCE_GPU_HOURS: Mapping[str, float] = {
    "cifar10": 0.5,
    "ncf": 0.5,
    "deepspeech2": 3.16,  # sqrt(1 * 10)
    "bert": 3.16,
    "yolov3": 31.6,  # sqrt(10 * 100)
    "imagenet": 316.0,  # sqrt(100 * 1000)
}

# The Pollux simulator sizes its jobs for "a cluster of 16 nodes each with 4 GPUs"
# (simulator/applications.py), so no job can hold more than 64 GPUs.
MAX_GPUS = 64

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def load_adaptdl(path: Path, *, gpu_hours: Mapping[str, float] = REFERENCE_GPU_HOURS) -> Parsed:
    jobs = Collector(path)
    for row in read_table(path, required=COLUMNS):
        name = row.text("name")
        if not name:
            raise row.fail("name", "missing value")
        application = row.text("application")
        hours = gpu_hours.get(application)
        if hours is None:
            known = ", ".join(sorted(gpu_hours))
            raise row.fail("application", f"unknown application {application!r} (known: {known})")
        num_replicas = row.integer("num_replicas", minimum=1)
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=name,
                submit_s=row.number("time", minimum=0.0),
                num_gpus=num_replicas,
                min_gpus=1,
                max_gpus=max(MAX_GPUS, num_replicas),
                model=application,
                duration_s=hours * 3600.0 / num_replicas,
                batch_size=row.optional_integer("batch_size", minimum=1),
            )
        jobs.add(job, row.line)
    return jobs.result()
