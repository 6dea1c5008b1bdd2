"""Replay benchmark: a 100,000-job synthetic Philly-like trace on 2,048 GPUs (256x8).

    .venv/bin/python bench/replay.py [--jobs N] [--cluster 256x8] [--policies fifo,srtf]

Prints, per policy, the whole replay's wall time (trace loading included) and the
replay's own figures. Goal (issue 2): <= 30 s for FIFO and for SRTF on the 2-core
development machine. Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from controller.spec import load_cluster
from controller.traces import write_canonical
from controller.traces.synthetic import generate
from gpuflow.cli import ReplayArgs, run_replay


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--cluster", default="256x8")
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--policies", default="fifo,srtf")
    p.add_argument("--interval", type=float, default=60.0)
    args = p.parse_args()

    cluster = load_cluster(args.cluster)
    t0 = time.perf_counter()
    jobs = generate(args.jobs, seed=42, cluster_gpus=cluster.num_gpus, load=args.load)
    gen_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "philly-like.csv"
        write_canonical(path, jobs)
        print(
            f"generated {len(jobs)} jobs in {gen_s:.2f} s; cluster {args.cluster} "
            f"({cluster.num_gpus} GPUs); load {args.load}; round interval {args.interval} s"
        )
        for policy in args.policies.split(","):
            ra = ReplayArgs(
                trace=str(path),
                fmt="gpuflow",
                cluster=args.cluster,
                policy=policy,
                placement="consolidated",
                interval_s=args.interval,
                seed=0,
                failures=None,
                max_time_s=None,
            )
            t0 = time.perf_counter()
            result, summary = run_replay(ra)
            whole_s = time.perf_counter() - t0
            figures = {
                "policy": policy,
                "whole_s": round(whole_s, 2),
                "replay_s": round(result.wall_s, 2),
                "rounds": result.rounds,
                "finished": summary.finished,
                "avg_jct_s": round(summary.avg_jct_s or 0.0, 1),
                "makespan_s": round(summary.makespan_s, 1),
                "gpu_utilization": round(summary.gpu_utilization, 4),
            }
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
