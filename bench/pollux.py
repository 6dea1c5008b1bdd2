"""Pollux benchmark: one scheduling round at 100 jobs, and the Pollux paper's workloads.

    .venv/bin/python bench/pollux.py [--workloads 1-8] [--policies pollux,...] [--skip-replay]

(a) Times `Pollux().schedule` on a snapshot of 100 active jobs (half running, half
    waiting; the six Pollux applications) on the Pollux testbed: cold (goodput tables
    built; the catalogue's own one-off loading and fitting of the measured profiles is
    timed apart) and warm (the next round, a minute later, state carried). Goal
    (issue 4): <= 1 s a round. CPU seconds are printed too: the machine is shared.
(b) Replays the eight 160-job workloads of the Pollux evaluation
    (`examples/traces/pollux/workload-N.csv`, shipped from the artifact) on the
    paper's testbed, `g4dn-12xlarge:16` (16 nodes x 4 T4), with 60 s rounds, under
    each policy variant asked for, and prints per workload and policy the average JCT
    and the replay's wall and CPU time, then the mean average JCT per policy. Goals:
    Pollux <= 60 s of wall time a replay; average JCT ordered Pollux < Tiresias <
    Optimus, as in the paper.

The variants (`VARIANTS`): each registered policy with gpuflow's defaults, and the two
baselines as the Pollux evaluation ran them: `tiresias-paper` with the artifact's
`tiresias.py` configuration (two queues split at 16 GPU-hours, no promotion) and
`optimus-paper` allocating with no switching cost (`resize_hysteresis = -1`: the
Optimus paper's allocation ignores restarts, and the artifact's Optimus+Oracle re-plans
from scratch every round).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from controller.model import Allocation, GpuPool, JobSpec, JobStatus, JobView, Snapshot
from controller.model.catalog import measured_profile, resolve
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.pollux import Pollux
from policies.registry import make_policy

# Run as a script, bench/ is on sys.path but the project root (for bench.*) may not be.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.snapshots import job_view

CLUSTER = "g4dn-12xlarge:16"
WORKLOADS = Path(__file__).resolve().parent.parent / "examples" / "traces" / "pollux"
APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
# name -> (registered policy, options): gpuflow's defaults and the Pollux evaluation's.
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "pollux": ("pollux", {}),
    "tiresias": ("tiresias", {}),
    "tiresias-paper": ("tiresias", {"thresholds_gpu_s": (16 * 3600.0,), "starve_limit": 0.0}),
    "optimus": ("optimus", {}),
    "optimus-paper": ("optimus", {"resize_hysteresis": -1.0}),
    "srtf": ("srtf", {}),
    "fifo": ("fifo", {}),
}


def round_snapshot(num_jobs: int, seed: int) -> Snapshot:
    """`num_jobs` AdaptDL jobs on the testbed: about half running, the rest waiting."""
    cluster = load_cluster(CLUSTER)
    placer = ConsolidatedPlacer(cluster)
    pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
    rng = np.random.default_rng(seed)
    apps = list(APPS)
    now = 4 * 3600.0
    views: list[JobView] = []
    for i in range(num_jobs):
        app = apps[int(rng.integers(len(apps)))]
        spec = JobSpec(
            job_id=f"{app}-{i:03d}",
            submit_s=float(rng.uniform(0.0, now)),
            num_gpus=1,
            min_gpus=1,
            max_gpus=64,
            model=app,
            iterations=1e5,
            batch_size=resolve(app).batch_size,
        )
        size = int(rng.choice([1, 1, 2, 4]))
        alloc: Allocation | None = None
        if i % 2 == 0:
            probe = job_view(spec, JobStatus.QUEUED, None, now, 0.0)
            alloc = placer.place(pool, probe, size)
            if alloc is not None:
                pool.take(alloc)
        status = JobStatus.RUNNING if alloc is not None else JobStatus.PREEMPTED
        views.append(job_view(spec, status, alloc, now, float(rng.uniform(0.0, 0.9))))
    return Snapshot(now_s=now, cluster=cluster, jobs=tuple(views), placer=placer)


def bench_round(seed: int) -> None:
    t0 = time.perf_counter()
    for app in APPS:  # the catalogue reads and fits its profiles once
        measured_profile(app)
    catalogue_s = time.perf_counter() - t0
    snapshot = round_snapshot(100, seed)
    policy = Pollux(seed=seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    plan = policy.schedule(snapshot, None)
    cold_s, cold_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    later = replace(snapshot, now_s=snapshot.now_s + 60.0)
    t0, cpu0 = time.perf_counter(), time.process_time()
    policy.schedule(later, plan.state)
    warm_s, warm_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    figures = {
        "round": f"100 jobs on {CLUSTER}",
        "catalogue_load_s": round(catalogue_s, 3),
        "cold_s": round(cold_s, 3),
        "cold_cpu_s": round(cold_cpu_s, 3),
        "warm_s": round(warm_s, 3),
        "warm_cpu_s": round(warm_cpu_s, 3),
        "running_after": len(plan.run),
        "gpus_used": sum(a.num_gpus for a in plan.run.values()),
    }
    print(json.dumps(figures))


def bench_replay(workloads: list[int], names: list[str], seed: int) -> None:
    cluster = load_cluster(CLUSTER)
    means: dict[str, list[float]] = {name: [] for name in names}
    for number in workloads:
        trace = load_trace(WORKLOADS / f"workload-{number}.csv", "adaptdl")
        for name in names:
            registered, options = VARIANTS[name]
            policy = (
                Pollux(seed=seed) if registered == "pollux" else make_policy(registered, **options)
            )
            sim = Simulator(
                cluster,
                trace.jobs,
                policy,
                ConsolidatedPlacer(cluster),
                SimConfig(round_interval_s=60.0, seed=seed),
                trace_name=trace.name,
            )
            t0, cpu0 = time.perf_counter(), time.process_time()
            result = sim.run()
            wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
            jcts = [o.finish_s - o.submit_s for o in result.jobs if o.finish_s is not None]
            avg = sum(jcts) / len(jcts) if jcts else float("nan")
            means[name].append(avg)
            figures = {
                "workload": number,
                "policy": name,
                "finished": len(jcts),
                "avg_jct_s": round(avg),
                "makespan_h": round(max(o.finish_s or 0.0 for o in result.jobs) / 3600.0, 2),
                "restarts": sum(o.restarts for o in result.jobs),
                "rounds": result.rounds,
                "wall_s": round(wall_s, 2),
                "cpu_s": round(cpu_s, 2),
            }
            print(json.dumps(figures), flush=True)
    print(json.dumps({"mean_avg_jct_s": {n: round(sum(v) / len(v)) for n, v in means.items()}}))


def numbers(text: str) -> list[int]:
    """`1-8` or `1,3,5` -> the workload numbers."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(n) for n in text.split(",")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", default="1-8")
    p.add_argument("--policies", default="pollux,tiresias-paper,optimus-paper,tiresias,optimus")
    p.add_argument("--skip-replay", action="store_true")
    args = p.parse_args()
    bench_round(args.seed)
    if not args.skip_replay:
        bench_replay(numbers(args.workloads), args.policies.split(","), args.seed)


if __name__ == "__main__":
    main()
