"""Deadlines benchmark (issue 32): ElasticFlow's Figure 8(a) trace under five policies.

    .venv/bin/python bench/deadlines.py [--policies edf,gandiva,...] [--t4 DIR]

Replays `examples/traces/elasticflow/elasticVpollux_e.csv` (the 195 jobs of
ElasticFlow's Figure 8(a), ASPLOS 2023) on 16 servers of 4 T4 GPUs
(`g4dn-12xlarge:16`) with 60 s rounds, each job starting at its traced batch and GPU
count, and prints for each policy the deadline ratio (jobs finished by their deadline
over all 195, refused ones missed), the published figure, the difference, and the
replay's wall time. `edf`, `gandiva`, `tiresias` and `elasticflow` run twice: with
gpuflow's defaults, and in ElasticFlow's evaluation setting (`EVALUATION`, `Run`): EDF
at each job's largest size (`gang=max`) capped at the largest size ElasticFlow's T4
table profiles for its model and batch, as its simulator's `jobs.py` sizes every
baseline; Gandiva with every job at its traced GPU count (`Run.rigid`: not elastic, as
ElasticFlow's simulator runs it); Tiresias without promotion and with a queue's running
jobs ahead of its waiting ones (`running_first`); and ElasticFlow capped at
`models.get_max_gpu` (policies.size_caps). Gandiva and ElasticFlow run once more with
ElasticFlow's per-event overhead (`SimConfig.event_overhead`: every running job
charged at every round).

With `--t4 DIR` (ElasticFlow's `scheduler/throughputs_T4/`, iterations per second by
global batch and GPU count) it first prints the performance model's speed beside the
table's for each model, batch and size on the same cluster, placed on the fewest
servers: how far the replays' speeds are from the ones ElasticFlow's simulator used;
and it checks `BASELINE_MAX_GPUS` against the table. `--round-anchor event` runs rounds
as ElasticFlow's simulator's slots do (at a change, at least 60 s after the last).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from pathlib import Path
from typing import NamedTuple

from controller.metrics import deadline_fields
from controller.model import JobSpec
from controller.model.catalog import resolve
from controller.model.gpu_choice.best_fit import fewest_servers
from controller.model.perf import throughput_ips
from controller.model.pool import GpuPool
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.sim.config import ROUND_ANCHORS
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.registry import make_policy

TRACE = Path(__file__).parents[1] / "examples" / "traces" / "elasticflow" / "elasticVpollux_e.csv"
CLUSTER = "g4dn-12xlarge:16"
# Figure 8(a) of the paper, as /work/shared/data/elasticflow/README.md records it.
PUBLISHED = {
    "edf": 0.118,
    "gandiva": 0.09,
    "tiresias": 0.287,
    "pollux": 0.523,
    "elasticflow": 0.728,
}
# ElasticFlow's simulator (github.com/pkusys/ElasticFlow at 04a0109) sizes a
# baseline job at most at the largest GPU count its T4 table profiles for the job's
# model and batch, at most 64 and at most the batch (scheduler/jobs.py `add_job`,
# `max_gpu`): the table's `nan` cells cap yolov3 at batch 64 to 16 GPUs and
# deepspeech2 at batch 320 to 32; every other model and batch of the trace reaches 64.
BASELINE_MAX_GPUS = {"yolov3:64": 16, "deepspeech2:320": 32}
# ...and ElasticFlow's own jobs at `models.get_max_gpu(job, "T4")`.
ELASTICFLOW_MAX_GPUS = {"bert": 16, "cifar10": 16, "deepspeech2:320": 32, "yolov3": 4, "ncf": 1}
# ElasticFlow's evaluation setting, by policy (docs/benchmarks.md states what differs).
# Its Tiresias (`dlas_sim_jobs(True)`, `dlas-gpu`) runs with `solve_starvation=0`: no
# promotion; and keeps a queue's running jobs ahead of its waiting ones (it moves the
# pending jobs to the back of each queue every round): `running_first`.
EVALUATION: dict[str, dict[str, object]] = {
    "edf": {"gang": "max", "max_gpus_by": BASELINE_MAX_GPUS},
    "tiresias": {"starve_limit": 0.0, "running_first": True},
    "elasticflow": {"max_gpus_by": ELASTICFLOW_MAX_GPUS},
    # gpuflow's options; what differs is the jobs (`Run.rigid`).
    "gandiva": {},
}


class Run(NamedTuple):
    policy: str
    options: dict[str, object]
    # ElasticFlow's simulator charges every running job an overhead at every scheduling
    # event under ElasticFlow and Gandiva (`ef_sim_jobs_access_control`,
    # `gandiva_sim_jobs`), not under EDF (commented out there): SimConfig.event_overhead.
    event_overhead: bool = False
    # Every job at its traced GPU count, not elastic: ElasticFlow's simulator runs its
    # Gandiva so (`gandiva_placement` takes `num_gpu` as traced; nothing resizes a job),
    # where gpuflow's Gandiva grows elastic jobs into idle GPUs (§4.1 grow-shrink).
    rigid: bool = False


RUNS: tuple[Run, ...] = (
    Run("edf", {}),
    Run("edf", EVALUATION["edf"]),
    Run("gandiva", {}),
    Run("gandiva", {}, event_overhead=True),
    Run("gandiva", EVALUATION["gandiva"], rigid=True),
    Run("gandiva", EVALUATION["gandiva"], event_overhead=True, rigid=True),
    Run("tiresias", {}),
    Run("tiresias", EVALUATION["tiresias"]),
    Run("pollux", {}),
    Run("elasticflow", {}),
    Run("elasticflow", EVALUATION["elasticflow"]),
    Run("elasticflow", EVALUATION["elasticflow"], event_overhead=True),
)


def rigid_job(job: JobSpec) -> JobSpec:
    """`job` at its asked-for GPU count only (`Run.rigid`)."""
    return dataclasses.replace(job, min_gpus=job.num_gpus, max_gpus=job.num_gpus)


def compare_t4(folder: Path) -> None:
    cluster = load_cluster(CLUSTER)
    empty = GpuPool.of_cluster(cluster)
    caps: dict[str, int] = {}
    print("model,batch,gpus,table_ips,model_ips,ratio")
    for path in sorted(folder.glob("*.csv")):
        with path.open() as f:
            rows = list(csv.reader(f))
        sizes = [int(s) for s in rows[0][1:]]
        for row in rows[1:]:
            batch = int(row[0])
            top = max(g for g, c in zip(sizes, row[1:], strict=True) if c != "nan")
            if min(top, batch) < min(64, batch):
                caps[f"{path.stem}:{batch}"] = min(top, batch)
            for gpus, cell in zip(sizes, row[1:], strict=True):
                if cell == "nan":
                    continue
                alloc = fewest_servers(empty, gpus)
                assert alloc is not None
                ours = throughput_ips(resolve(path.stem), cluster, alloc, batch_size=batch)
                table = float(cell)
                print(f"{path.stem},{batch},{gpus},{table:.4g},{ours:.4g},{ours / table:.2f}")
    if caps != BASELINE_MAX_GPUS:
        raise SystemExit(f"BASELINE_MAX_GPUS is {BASELINE_MAX_GPUS}; the table gives {caps}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", help="comma-separated subset (default: all five)")
    parser.add_argument("--t4", type=Path, help="ElasticFlow's throughputs_T4 folder")
    parser.add_argument(
        "--round-anchor",
        choices=ROUND_ANCHORS,
        default="grid",
        help="rounds on the 60 s grid (gpuflow's) or at events, 60 s apart at least "
        "(ElasticFlow's simulator's slots)",
    )
    args = parser.parse_args()
    if args.t4:
        compare_t4(args.t4)
    wanted = set(args.policies.split(",")) if args.policies else None
    trace = load_trace(TRACE)
    cluster = load_cluster(CLUSTER)
    print("policy,options,met,jobs,ratio,published,diff,wall_s")
    for name, options, event_overhead, rigid in RUNS:
        if wanted is not None and name not in wanted:
            continue
        config = SimConfig(
            round_interval_s=60.0, round_anchor=args.round_anchor, event_overhead=event_overhead
        )
        jobs = [rigid_job(j) for j in trace.jobs] if rigid else list(trace.jobs)
        sim = Simulator(
            cluster,
            jobs,
            make_policy(name, **options),
            ConsolidatedPlacer(cluster),
            config,
            trace_name=trace.name,
        )
        started = time.perf_counter()
        figures = deadline_fields(sim.run())
        wall_s = time.perf_counter() - started
        ratio, published = figures["deadline_ratio"], PUBLISHED[name]
        evaluated = (options or rigid) and options is EVALUATION.get(name)
        shown = "ElasticFlow's setting" if evaluated else ""
        shown = shown or ";".join(f"{k}={v}" for k, v in options.items())
        if event_overhead:
            shown = f"{shown} + event overhead".lstrip(" +")
        print(
            f"{name},{shown},{figures['deadlines_met']},{figures['deadline_jobs']},"
            f"{ratio:.3f},{published},{ratio - published:+.3f},{wall_s:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
