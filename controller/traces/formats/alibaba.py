"""Alibaba GPU cluster traces: PAI 2020 (`alibaba-pai`) and the 2023 openb pods (`alibaba-openb`).

**alibaba-pai** (Weng et al., NSDI 2022; github.com/alibaba/clusterdata,
cluster-trace-gpu-v2020). The release's job table, `pai_job_table.csv`
(job_name,inst_id,user,status,start_time,end_time), has no GPU counts: those are in
the task table, `pai_task_table.csv` (job_name,task_name,inst_num,status,start_time,
end_time,plan_cpu,plan_mem,plan_gpu,gpu_type), where plan_gpu is the GPUs asked per
instance in percent (50 = half a GPU). The task table alone gives a replayable job,
so that is the file this format reads (the job table is refused with a pointer here).
Both are released without a header; a header row naming the columns is accepted too.
A job is the group of task rows sharing a job_name:

- GPU demand = sum over its tasks of inst_num * plan_gpu / 100 GPUs; num_gpus is that
  rounded up. A job asking for less than one whole GPU may share one: it gets
  gpu_mem_mib = demand * `gpu_mem_mib_per_gpu`;
- submit_s is its first task's launch and duration_s its last task's end minus that
  (the task table has launch, not submission, times, so the replay starts without the
  job's original queueing delay);
- the job is named by job_name.

Skipped: jobs asking for no GPU, jobs with a task that never started or ended
(Waiting, or Running when the trace was cut), and jobs of zero length.

**alibaba-openb** (Weng et al., USENIX ATC 2023; cluster-trace-gpu-v2023,
`openb_pod_list_*.csv`: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
pod_phase,creation_time,deletion_time,scheduled_time, times in seconds). A pod is a
job submitted at creation_time that runs from scheduled_time to deletion_time.
num_gpu GPUs are asked; gpu_milli < 1000 with num_gpu 1 is a share of one GPU, which
becomes num_gpus = 1 with gpu_mem_mib = gpu_milli / 1000 * `gpu_mem_mib_per_gpu`, so
the job can share its GPU with others whose memory fits beside it (the trace gives one
number for the share; it is taken to apply to memory as to compute), and the share is
the job's GPU utilisation (`JobSpec.gpu_util`: a pod capped to gpu_milli of a GPU's
compute uses at most that much of it; the trace measures no utilisation, and a pod of
whole GPUs keeps its model's catalogue figure). qos becomes the
priority (`QOS_PRIORITY`). The pod's CPU and memory become the job's `cpu_milli` and
`host_mem_mib`, a share also its `gpu_milli`, and `gpu_spec` its `gpu_models` (openb's
names translated to gpuflow's GPU types, `controller.spec.types.OPENB_MODELS`, as the
openb node list loads them). Skipped: CPU pods (num_gpu 0) and pods never scheduled,
never deleted, or of zero length.

`load_openb_nodes` reads the matching node list (`openb_node_list_*.csv`:
sn,cpu_milli,memory_mib,gpu,model) for the cluster-spec code.

FGD's placement experiment reads the same files with every resource kept
(`experiments.packing.openb`).

Loaders called through `load_trace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from controller.model.job import JobSpec
from controller.spec.types import OPENB_MODELS
from controller.traces.rows import (
    Collector,
    Row,
    finite,
    job_errors,
    read_columns,
    read_table,
    span_s,
)
from controller.traces.trace import Parsed, TraceError

PAI_FORMAT = "alibaba-pai"
OPENB_FORMAT = "alibaba-openb"

# 16 GiB: the memory of a V100M16 or T4, the smallest of the common cards in both
# Alibaba clusters; a share of a larger card then fits with room to spare.
GPU_MEM_MIB_PER_GPU = 16 * 1024

PAI_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")

OPENB_POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

# Kubernetes-style QoS classes in the openb trace, most protected first.
QOS_PRIORITY = {"LS": 2, "Burstable": 1, "BE": 0}


@dataclass(slots=True)
class _PaiJob:
    line: int
    last_line: int = 0
    gpu_percent: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    never_ran: bool = False

    def add_task(self, row: Row) -> None:
        # Finite counts can still multiply or add up to infinity.
        self.gpu_percent = finite(
            row.path,
            row.line,
            "plan_gpu",
            self.gpu_percent
            + row.number("inst_num", minimum=0.0)
            * (row.optional_number("plan_gpu", minimum=0.0) or 0.0),
        )
        self.last_line = row.line
        start_s = row.optional_number("start_time")
        end_s = row.optional_number("end_time")
        if start_s is None or end_s is None:
            self.never_ran = True
            return
        if end_s < start_s:
            raise row.fail("end_time", "task ends before it starts")
        self.start_s = start_s if self.start_s is None else min(self.start_s, start_s)
        self.end_s = end_s if self.end_s is None else max(self.end_s, end_s)


def load_alibaba_pai(path: Path, *, gpu_mem_mib_per_gpu: int = GPU_MEM_MIB_PER_GPU) -> Parsed:
    groups: dict[str, _PaiJob] = {}
    layouts = {len(PAI_TASK_COLUMNS): PAI_TASK_COLUMNS, len(PAI_JOB_COLUMNS): PAI_JOB_COLUMNS}
    for row in read_columns(path, layouts=layouts, delimiter=",", header_first_cell="job_name"):
        if len(row.values) == len(PAI_JOB_COLUMNS):
            raise row.fail(
                None,
                "this is a PAI job table, which has no GPU counts; "
                "load the task table (pai_task_table.csv) instead",
            )
        job_name = row.required_text("job_name")
        groups.setdefault(job_name, _PaiJob(row.line)).add_task(row)
    jobs = Collector(path)
    for job_name, group in groups.items():
        if (
            group.never_ran
            or group.gpu_percent == 0
            or group.start_s is None
            or group.end_s is None
        ):
            jobs.skip()
            continue
        duration_s = finite(path, group.last_line, "end_time", group.end_s - group.start_s)
        if duration_s == 0:
            jobs.skip()
            continue
        demand_gpus = group.gpu_percent / 100.0
        shared = demand_gpus < 1.0
        with job_errors(path, group.line):
            job = JobSpec(
                job_id=job_name,
                submit_s=group.start_s,
                num_gpus=max(1, math.ceil(demand_gpus - 1e-9)),
                duration_s=duration_s,
                gpu_mem_mib=max(1, round(demand_gpus * gpu_mem_mib_per_gpu)) if shared else None,
            )
        jobs.add(job, group.line)
    return jobs.result()


def _openb_duration_s(row: Row) -> float | None:
    scheduled_s = row.optional_number("scheduled_time")
    deleted_s = row.optional_number("deletion_time")
    if scheduled_s is None or deleted_s is None:
        return None
    backwards = "pod deleted before it was scheduled"
    return span_s(row.path, row.line, "deletion_time", scheduled_s, deleted_s, backwards)


def load_alibaba_openb(path: Path, *, gpu_mem_mib_per_gpu: int = GPU_MEM_MIB_PER_GPU) -> Parsed:
    jobs = Collector(path)
    rows = read_table(path, required=("name", "num_gpu", "gpu_milli", "creation_time"))
    for row in rows:
        name = row.required_text("name")
        num_gpus = row.integer("num_gpu", minimum=0)
        gpu_milli = row.optional_integer("gpu_milli", minimum=0) or 0
        submit_s = row.number("creation_time", minimum=0.0)
        duration_s = _openb_duration_s(row)
        if num_gpus == 0 or not duration_s:
            jobs.skip()
            continue
        if gpu_milli == 0 or gpu_milli > 1000:
            raise row.fail("gpu_milli", f"must be in 1..1000 for a GPU pod, got {gpu_milli}")
        if gpu_milli < 1000 and num_gpus > 1:
            raise row.fail("gpu_milli", "a GPU share is only possible with num_gpu 1")
        shared = gpu_milli < 1000
        models = _gpu_models(row)
        with job_errors(path, row.line):
            job = JobSpec(
                job_id=name,
                submit_s=submit_s,
                num_gpus=num_gpus,
                duration_s=duration_s,
                gpu_mem_mib=round(gpu_milli / 1000 * gpu_mem_mib_per_gpu) if shared else None,
                cpu_milli=row.optional_integer("cpu_milli", minimum=0) or 0,
                host_mem_mib=row.optional_integer("memory_mib", minimum=0) or 0,
                gpu_milli=gpu_milli if shared else 0,
                gpu_util=gpu_milli / 1000 if shared else None,
                gpu_models=frozenset(OPENB_MODELS[m] for m in models),
                priority=QOS_PRIORITY.get(row.text("qos"), 0),
            )
        jobs.add(job, row.line)
    return jobs.result()


def _gpu_models(row: Row) -> frozenset[str]:
    """The openb GPU models a pod's `gpu_spec` accepts ("V100M16|V100M32"; empty: any)."""
    models = frozenset(m.strip() for m in row.text("gpu_spec").split("|") if m.strip())
    unknown = sorted(models - OPENB_MODELS.keys())
    if unknown:
        known = ", ".join(OPENB_MODELS)
        raise row.fail("gpu_spec", f"unknown GPU model {unknown[0]!r} (known: {known})")
    return models


def load_openb_nodes(path: str | Path) -> list[tuple[str, int, str]]:
    """(name, gpus, gpu model) per node of an openb node list; CPU nodes have 0 and ""."""
    path = Path(path)
    nodes: list[tuple[str, int, str]] = []
    for row in read_table(path, required=("sn", "gpu")):
        name = row.required_text("sn")
        gpus = row.integer("gpu", minimum=0)
        model = row.text("model")
        nodes.append((name, gpus, "" if model.lower() == "nan" else model))
    if not nodes:
        raise TraceError(path, None, None, "no nodes")
    return nodes
