"""ElasticFlow's deadline traces (`elasticflow`):
`job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration`.

The traces of ElasticFlow's simulator (Gu et al., "ElasticFlow: An Elastic Serverless
Training Platform for Distributed Deep Learning", ASPLOS 2023; github.com/pkusys/
ElasticFlow, `ElasticFlow/traces_for_ElasticFlow/*.csv`, e.g. `elasticVpollux_e.csv`,
the 195 jobs of its Figure 8(a)). submit_time and ddl (the absolute deadline) are in
seconds; iteration is the job's length in steps at its global batch_size; model_name
is one of Pollux's six applications (bert, cifar10, deepspeech2, imagenet, ncf,
yolov3); num_gpu is the GPUs the job asked for; duration, its run time as traced at
num_gpu, is not needed (the steps are) and is ignored, as are extra columns.

Each job becomes a `JobSpec` with `deadline_s = ddl - submit_time` (a deadline at or
before the submission is an error on its line), its steps counted at its own batch
(`work_batch = batch_size`, so a policy that changes the batch, as Pollux does, is
credited each step's statistical gain), and elastic from 1 GPU to at most `MAX_GPUS`
and at most its batch size (one sample per GPU), the bound ElasticFlow's simulator
sets (scheduler/jobs.py `max_gpu`), as ElasticFlow chooses each job's GPUs itself.
Called through `load_trace`.
"""

from __future__ import annotations

from pathlib import Path

from controller.model.catalog import MEASURED_APPS, measured_profile
from controller.model.job import JobSpec
from controller.traces.rows import Collector, job_errors, read_table
from controller.traces.trace import Parsed

FORMAT = "elasticflow"

# ElasticFlow's throughput tables (scheduler/throughputs_T4/) stop at 64 GPUs, the
# size of the paper's simulated cluster (16 servers of 4 T4s).
MAX_GPUS = 64

COLUMNS = ("job_id", "submit_time", "iteration", "model_name", "ddl", "batch_size", "num_gpu")


def load_elasticflow(path: Path) -> Parsed:
    jobs = Collector(path)
    for row in read_table(path, required=COLUMNS):
        job_id = row.required_text("job_id")
        model = row.text("model_name")
        if measured_profile(model) is None:
            known = ", ".join(MEASURED_APPS)
            raise row.fail("model_name", f"unknown model {model!r} (known: {known})")
        submit_s = row.number("submit_time", minimum=0.0)
        ddl_s = row.number("ddl")
        if ddl_s <= submit_s:
            raise row.fail("ddl", f"{row.text('ddl')} is not after submit_time {submit_s:g}")
        num_gpus = row.integer("num_gpu", minimum=1)
        batch_size = row.integer("batch_size", minimum=1)
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=job_id,
                submit_s=submit_s,
                num_gpus=num_gpus,
                min_gpus=1,
                max_gpus=max(min(MAX_GPUS, batch_size), num_gpus),
                model=model,
                iterations=row.number("iteration", minimum=1.0),
                batch_size=batch_size,
                work_batch=batch_size,
                deadline_s=ddl_s - submit_s,
            )
        jobs.add(job, row.line)
    return jobs.result()
