"""Example workloads in other schedulers' formats, generated from gpuflow's seeded
synthetic Philly-like trace (controller.traces.formats.synthetic):

    .venv/bin/python bench/workloads.py examples/traces

- `tiresias_60.csv`: the Tiresias simulator's format
  (`job_id,num_gpu,submit_time,iterations,model_name,duration,interval`), 60 jobs
  over ~4 hours for a 4x4 cluster.
- `adaptdl_160.csv`: the AdaptDL/Pollux workload format
  (`name,time,application,num_replicas,batch_size`), 160 jobs over 8 hours, as the
  Pollux paper's workloads (OSDI'21 §5.2: 160 jobs sampled from Philly over 8 hours).
  Applications are drawn with gpuflow's weights below (the paper draws them by each
  Philly job's GPU-time class; these weights roughly follow how often each class
  occurs there: most jobs small), batch sizes are each application's reference batch
  in the Pollux artifact's profiles.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from controller.traces.formats.synthetic import generate

ADAPTDL_APPS = {  # application: (weight, initial batch size)
    "cifar10": (0.30, 128),
    "ncf": (0.25, 256),
    "deepspeech2": (0.15, 20),
    "bert": (0.15, 12),
    "yolov3": (0.10, 8),
    "imagenet": (0.05, 200),
}


def write_tiresias(path: Path) -> None:
    jobs = generate(60, seed=3, cluster_gpus=16, load=1.3)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(
            ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"]
        )
        for i, job in enumerate(jobs):
            duration = round(job.duration_s or 60.0)
            out.writerow([i, job.num_gpus, round(job.submit_s), 0, job.model, duration, 0])


def write_adaptdl(path: Path) -> None:
    rng = np.random.default_rng(11)
    names = list(ADAPTDL_APPS)
    weights = np.array([ADAPTDL_APPS[n][0] for n in names])
    times = np.sort(rng.uniform(0, 8 * 3600, 160))
    apps = rng.choice(len(names), size=160, p=weights / weights.sum())
    replicas = rng.choice([1, 1, 1, 2, 2, 4, 8], size=160)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["name", "time", "application", "num_replicas", "batch_size"])
        for i, (t, a, r) in enumerate(zip(times, apps, replicas, strict=True)):
            app = names[a]
            out.writerow([f"job-{i:03d}", int(t), app, int(r), ADAPTDL_APPS[app][1]])


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "examples/traces")
    folder.mkdir(parents=True, exist_ok=True)
    write_tiresias(folder / "tiresias_60.csv")
    write_adaptdl(folder / "adaptdl_160.csv")
    print(f"wrote {folder}/tiresias_60.csv and {folder}/adaptdl_160.csv")


if __name__ == "__main__":
    main()
