"""Replay benchmarks: a trace replayed through the path of `gpuflow replay`.

Two sets, recorded in docs/benchmarks.md:

    .venv/bin/python bench/replay.py [--jobs N] [--cluster 256x8] [--policies fifo,srtf]

  (issue 2) a 100,000-job synthetic Philly-like trace on 2,048 GPUs, where nobody
  waits long. Goal: <= 30 s for FIFO and for SRTF on the 2-core development machine.

    .venv/bin/python bench/replay.py --at-load [--trace PATH] [--first N]
        [--clusters 32x8,64x8] [--policies fifo,srtf,tiresias,gandiva]

  (issue 16) replays at load, where queues of thousands form: a trace (the Philly
  release's `cluster_job_log`, or any format `gpuflow replay` reads; default: the
  Philly-like stand-in below) on each cluster under each policy. Goal: each replay
  <= 60 s, with the same average JCT as before the round's cost was made to follow
  what changed.

    .venv/bin/python bench/replay.py --million [--policies fifo,tiresias]

  (issue 16, part 4) a 1,000,000-job synthetic Philly-like trace (seed 42, load 0.9
  of 256x8) replayed on 256x8, each policy in a fresh process. Goal: peak RSS <= 4 GiB.

Prints one JSON line per replay: wall time of the whole replay (trace loading
included) and of the simulation, CPU seconds, rounds, average JCT, and the longest
queue; with --million also the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from controller.spec import load_cluster
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from gpuflow.cli import ReplayArgs, run_replay

# The Philly-like stand-in for replays at load: as many jobs as the Philly trace
# replayed in issue 16 (82,248), offered at 15 % of 256x8 as that trace was (so 1.2
# of 32x8 and 0.6 of 64x8), arriving with a daily swing. Seed 16 for the issue.
STAND_IN_JOBS = 82_248
STAND_IN_SEED = 16
STAND_IN_SIZED_FOR = "256x8"
STAND_IN_LOAD = 0.15


def _replay(
    trace: Path, fmt: str | None, cluster: str, policy: str, interval_s: float
) -> dict[str, object]:
    ra = ReplayArgs(
        trace=str(trace),
        fmt=fmt,
        cluster=cluster,
        policy=policy,
        placement="consolidated",
        interval_s=interval_s,
        seed=0,
        failures=None,
        max_time_s=None,
    )
    t0, cpu0 = time.perf_counter(), time.process_time()
    result, summary = run_replay(ra)
    whole_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "policy": policy,
        "cluster": cluster,
        "whole_s": round(whole_s, 2),
        "replay_s": round(result.wall_s, 2),
        "cpu_s": round(cpu_s, 2),
        "rounds": result.rounds,
        "finished": summary.finished,
        "avg_jct_s": round(summary.avg_jct_s or 0.0, 1),
        "max_queue": max((s.queued for s in result.timeline), default=0),
        "makespan_s": round(summary.makespan_s, 1),
        "gpu_utilization": round(summary.gpu_utilization, 4),
    }


def _at_load(args: argparse.Namespace, tmp: Path) -> None:
    fmt: str | None = None
    if args.trace:
        trace = Path(args.trace)
        if args.first:
            from controller.traces import load_trace

            jobs = sorted(load_trace(str(trace)).jobs, key=lambda j: (j.submit_s, j.job_id))
            trace, fmt = tmp / "first.csv", "gpuflow"
            write_canonical(trace, jobs[: args.first])
    else:
        sized = load_cluster(STAND_IN_SIZED_FOR).num_gpus
        jobs = generate(
            STAND_IN_JOBS,
            seed=STAND_IN_SEED,
            cluster_gpus=sized,
            load=STAND_IN_LOAD,
            arrival="diurnal",
        )
        trace, fmt = tmp / "philly-like.csv", "gpuflow"
        write_canonical(trace, jobs[: args.first or None])  # in arrival order
    print(f"trace {args.trace or 'Philly-like stand-in'}; first {args.first or 'all'} jobs")
    for cluster in args.clusters.split(","):
        for policy in args.policies.split(","):
            print(json.dumps(_replay(trace, fmt, cluster, policy, args.interval)), flush=True)


# The million-job trace of issue 16 part 4: the issue-2 workload (seed 42, load 0.9 of
# 256x8) ten times longer.
MILLION_JOBS = 1_000_000


def _million(args: argparse.Namespace, tmp: Path) -> None:
    """Each policy in a child process, so that its peak RSS is the replay's alone."""
    trace = tmp / "million.csv"
    cluster = load_cluster("256x8")
    write_canonical(trace, generate(MILLION_JOBS, seed=42, cluster_gpus=cluster.num_gpus, load=0.9))
    print(f"trace {MILLION_JOBS} jobs, {trace.stat().st_size / 2**20:.1f} MiB; cluster 256x8")
    for policy in args.policies.split(","):
        child = [sys.executable, __file__, "--one", str(trace), "--policies", policy]
        out = subprocess.run(child, capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)


def _one(args: argparse.Namespace) -> None:
    """Child of --million: one replay, with the peak RSS (ru_maxrss: KiB on Linux)."""
    figures = _replay(Path(args.one), "gpuflow", "256x8", args.policies, args.interval)
    figures["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(figures))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--cluster", default="256x8")
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--policies", default=None)
    p.add_argument("--interval", type=float, default=60.0)
    p.add_argument("--at-load", action="store_true", help="the issue-16 replays at load")
    p.add_argument("--trace", default=None, help="--at-load: a trace file (default: stand-in)")
    p.add_argument("--first", type=int, default=0, help="--at-load: only the first N jobs")
    p.add_argument("--clusters", default="32x8,64x8", help="--at-load: clusters")
    p.add_argument("--million", action="store_true", help="the 1,000,000-job memory run")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # --million's child
    args = p.parse_args()
    if args.one:
        _one(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        if args.at_load:
            args.policies = args.policies or "fifo,srtf,tiresias,gandiva"
            _at_load(args, Path(tmp))
            return
        if args.million:
            args.policies = args.policies or "fifo,tiresias"
            _million(args, Path(tmp))
            return
        cluster = load_cluster(args.cluster)
        t0 = time.perf_counter()
        jobs = generate(args.jobs, seed=42, cluster_gpus=cluster.num_gpus, load=args.load)
        gen_s = time.perf_counter() - t0
        path = Path(tmp) / "philly-like.csv"
        write_canonical(path, jobs)
        print(
            f"generated {len(jobs)} jobs in {gen_s:.2f} s; cluster {args.cluster} "
            f"({cluster.num_gpus} GPUs); load {args.load}; round interval {args.interval} s"
        )
        for policy in (args.policies or "fifo,srtf").split(","):
            figures = _replay(path, "gpuflow", args.cluster, policy, args.interval)
            del figures["cluster"], figures["max_queue"]
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
