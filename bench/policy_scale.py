"""Pollux and Optimus at production size (issue 16): one round, and a Philly replay.

    PYTHONPATH=. .venv/bin/python bench/policy_scale.py [--jobs 1000] [--cluster 256x8]
        [--repeat 5] [--policies pollux,optimus] [--replay-jobs 10000]
        [--replay-cluster 64x8] [--trace PATH] [--skip-replay]

(a) One round at scale: a snapshot of `--jobs` active jobs (1,000) on `--cluster`
    (256x8: 2,048 GPUs). Each job is one of the six Pollux applications (the measured
    profiles), elastic from 1 GPU to 64 as the Pollux workloads' jobs, asking for a
    Philly-sized gang (`controller.traces.formats.synthetic.GPU_COUNT_SHARES`: 70 % one GPU,
    a tail to 32); every other job runs at its size, placed consolidated while GPUs
    last (about 1,200 of the 2,048 GPUs held), the rest wait; progress uniform in
    [0, 0.9). The round is timed cold (goodput tables and profiles built) and then
    `--repeat` times warm, each a minute later with the previous plan's state, as a
    replay runs them; the warm rounds' median and max are printed, wall and CPU.
(b) A replay of the first `--replay-jobs` jobs (10,000) of the Philly trace, in arrival
    order, on `--replay-cluster` (64x8), 60 s rounds, timing every `schedule` call.
    `--trace` is the philly-csv file (AdaptDL's `simulator/traces/philly.csv`, the
    82,248 jobs of issue 16); without it the jobs are the synthetic Philly-like
    workload (`controller.traces.formats.synthetic.generate`, seed 42, offered load `--load`,
    1.0),
    since the trace is not shipped with gpuflow. Prints the rounds, their median and
    largest time, and the replay's average JCT.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from controller.model import (
    Allocation,
    GpuPool,
    JobSpec,
    JobStatus,
    JobView,
    Plan,
    Policy,
    Snapshot,
)
from controller.model.catalog import measured_profile, resolve
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from controller.traces.formats.synthetic import GPU_COUNT_SHARES, generate
from policies.registry import make_policy

# Run as a script, bench/ is on sys.path but the project root (for bench.*) may not be.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.snapshots import job_view

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
MAX_GPUS = 64  # the Pollux workloads' cap (controller/traces/formats/adaptdl.py)
PROGRESS_ROUNDS = 1000  # a replay reports its rounds so far to stderr this often


def round_snapshot(cluster_name: str, num_jobs: int, seed: int) -> Snapshot:
    """`num_jobs` elastic jobs of the Pollux applications at Philly sizes on the cluster:
    every other one running at its size while it places, the rest waiting."""
    cluster = load_cluster(cluster_name)
    placer = ConsolidatedPlacer(cluster)
    pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
    rng = np.random.default_rng(seed)
    sizes = list(GPU_COUNT_SHARES)
    shares = np.array(list(GPU_COUNT_SHARES.values()))
    now = 4 * 3600.0
    views: list[JobView] = []
    for i in range(num_jobs):
        app = APPS[int(rng.integers(len(APPS)))]
        size = int(sizes[int(rng.choice(len(sizes), p=shares / shares.sum()))])
        spec = JobSpec(
            job_id=f"{app}-{i:04d}",
            submit_s=float(rng.uniform(0.0, now)),
            num_gpus=size,
            min_gpus=1,
            max_gpus=max(MAX_GPUS, size),
            model=app,
            iterations=1e5,
            batch_size=resolve(app).batch_size,
        )
        progress = float(rng.uniform(0.0, 0.9))
        alloc: Allocation | None = None
        if i % 2 == 0:
            alloc = placer.place(pool, job_view(spec, JobStatus.QUEUED, None, now, 0.0), size)
            if alloc is not None:
                pool.take(alloc)
        status = JobStatus.RUNNING if alloc is not None else JobStatus.PREEMPTED
        views.append(job_view(spec, status, alloc, now, progress))
    return Snapshot(now_s=now, cluster=cluster, jobs=tuple(views), placer=placer)


def bench_round(name: str, cluster: str, num_jobs: int, repeat: int, seed: int) -> None:
    for app in APPS:  # the catalogue reads and fits its profiles once, not counted
        measured_profile(app)
    snapshot = round_snapshot(cluster, num_jobs, seed)
    policy = make_policy(name)
    t0, cpu0 = time.perf_counter(), time.process_time()
    plan = policy.schedule(snapshot, None)
    cold_s, cold_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    walls: list[float] = []
    cpus: list[float] = []
    state = plan.state
    for r in range(repeat):
        later = replace(snapshot, now_s=snapshot.now_s + 60.0 * (r + 1))
        t0, cpu0 = time.perf_counter(), time.process_time()
        state = policy.schedule(later, state).state
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - cpu0)
    figures = {
        "policy": name,
        "round": f"{num_jobs} jobs on {cluster}",
        "cold_s": round(cold_s, 3),
        "cold_cpu_s": round(cold_cpu_s, 3),
        "warm_median_s": round(statistics.median(walls), 3),
        "warm_max_s": round(max(walls), 3),
        "warm_median_cpu_s": round(statistics.median(cpus), 3),
        "warm_max_cpu_s": round(max(cpus), 3),
        "running_after": len(plan.run),
        "gpus_used": sum(a.num_gpus for a in plan.run.values()),
    }
    print(json.dumps(figures), flush=True)


@dataclass
class TimedPolicy:
    """A policy whose every `schedule` call is timed (wall and CPU seconds)."""

    inner: Policy
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    active: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        t0, cpu0 = time.perf_counter(), time.process_time()
        plan = self.inner.schedule(snapshot, state)
        self.wall_s.append(time.perf_counter() - t0)
        self.cpu_s.append(time.process_time() - cpu0)
        self.active.append(len(snapshot.jobs))
        if len(self.wall_s) % PROGRESS_ROUNDS == 0:
            progress = {
                "policy": self.name,
                "rounds": len(self.wall_s),
                "now_s": snapshot.now_s,
                "round_max_s": round(max(self.wall_s), 3),
                "round_max_cpu_s": round(max(self.cpu_s), 3),
                "most_active": max(self.active),
            }
            print(json.dumps(progress), file=sys.stderr, flush=True)
        return plan

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        order: list[str] = self.inner.queue_order(snapshot, state)  # type: ignore[attr-defined]
        return order


def replay_jobs(
    trace: str | None, num_jobs: int, cluster_gpus: int, load: float
) -> tuple[str, list[JobSpec]]:
    """The first `num_jobs` of the Philly trace by arrival (or the synthetic workload)."""
    if trace is None:
        jobs = generate(num_jobs, seed=42, cluster_gpus=cluster_gpus, load=load)
        return f"synthetic Philly-like (seed 42, load {load})", list(jobs)
    loaded = load_trace(trace, "philly-csv")
    first = sorted(loaded.jobs, key=lambda j: (j.submit_s, j.job_id))[:num_jobs]
    start = first[0].submit_s
    return f"Philly ({trace})", [replace(j, submit_s=j.submit_s - start) for j in first]


def bench_replay(name: str, cluster_name: str, label: str, jobs: list[JobSpec]) -> None:
    cluster = load_cluster(cluster_name)
    policy = TimedPolicy(make_policy(name))
    sim = Simulator(
        cluster,
        jobs,
        policy,
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, seed=0),
        trace_name="philly-first",
    )
    t0 = time.perf_counter()
    result = sim.run()
    wall_s = time.perf_counter() - t0
    jcts = [o.finish_s - o.submit_s for o in result.jobs if o.finish_s is not None]
    worst = int(np.argmax(policy.wall_s)) if policy.wall_s else 0
    figures = {
        "policy": name,
        "trace": label,
        "jobs": len(jobs),
        "cluster": cluster_name,
        "finished": len(jcts),
        "avg_jct_s": round(sum(jcts) / len(jcts), 1) if jcts else None,
        "rounds": len(policy.wall_s),
        "round_median_s": round(statistics.median(policy.wall_s), 4) if policy.wall_s else None,
        "round_max_s": round(max(policy.wall_s), 3) if policy.wall_s else None,
        "round_max_cpu_s": round(max(policy.cpu_s), 3) if policy.cpu_s else None,
        "active_at_max": policy.active[worst] if policy.active else None,
        "most_active": max(policy.active) if policy.active else None,
        "policy_s": round(sum(policy.wall_s), 1),
        "wall_s": round(wall_s, 1),
    }
    print(json.dumps(figures), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--cluster", default="256x8")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--policies", default="pollux,optimus")
    p.add_argument("--replay-jobs", type=int, default=10_000)
    p.add_argument("--replay-cluster", default="64x8")
    p.add_argument("--trace", default=None, help="philly-csv file (AdaptDL's philly.csv)")
    p.add_argument("--load", type=float, default=1.0, help="offered load without --trace")
    p.add_argument("--skip-round", action="store_true")
    p.add_argument("--skip-replay", action="store_true")
    args = p.parse_args()
    names = args.policies.split(",")
    if not args.skip_round:
        for name in names:
            bench_round(name, args.cluster, args.jobs, args.repeat, args.seed)
    if not args.skip_replay:
        gpus = load_cluster(args.replay_cluster).num_gpus
        label, jobs = replay_jobs(args.trace, args.replay_jobs, gpus, args.load)
        for name in names:
            bench_replay(name, args.replay_cluster, label, jobs)


if __name__ == "__main__":
    main()
