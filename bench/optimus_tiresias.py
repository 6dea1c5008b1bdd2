"""Optimus against Tiresias on `bench/pollux.py`'s AdaptDL workload, under changes
that bring the setup closer to the Pollux paper's evaluation (issue 4).

    .venv/bin/python bench/optimus_tiresias.py [--seeds N]

Each line: the change, the seed, and the average JCT (hours) of each policy run
under it; with `--seeds N`, instead, Tiresias, Optimus and SRTF on the unchanged
workload for seeds 0..N-1 and their means (the paper averages 8 workloads). The
Pollux paper orders Tiresias ahead of Optimus; docs/benchmarks.md records what this
prints and what it says about the job model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pollux import requested, write_workload

from controller.model import JobSpec, Policy
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces.adaptdl import REFERENCE_GPU_HOURS, load_adaptdl
from policies.optimus import Optimus
from policies.srtf import Srtf
from policies.tiresias import Tiresias

# Configurations like the Pollux artifact's tuned workloads (simulator/workloads/*.csv):
# the GPUs and total batch each application's jobs ask for.
TUNED: Mapping[str, tuple[tuple[int, int], ...]] = {
    "cifar10": ((6, 2048), (8, 2048), (12, 4096), (16, 4096)),
    "ncf": ((1, 32768),),
    "deepspeech2": ((6, 320), (8, 320), (12, 640)),
    "bert": ((6, 384), (8, 384), (12, 384), (16, 384)),
    "yolov3": ((4, 64),),
    "imagenet": ((24, 3200), (32, 6400)),
}
# The Tiresias configuration of the Pollux evaluation (the artifact's tiresias.py):
# two queues split at 16 GPU-hours, no promotion.
POLLUX_EVAL_TIRESIAS = {"thresholds_gpu_s": (16 * 3600.0,), "starve_limit": 0.0}


def tuned_ask(app: str, rng: np.random.Generator) -> tuple[int, int]:
    """The GPUs and total batch a job of `app` asks for, drawn from `TUNED`."""
    return TUNED[app][int(rng.integers(len(TUNED[app])))]


def jobs_for(seed: int, tuned: bool, length_scale: float) -> list[JobSpec]:
    hours = {app: h * length_scale for app, h in REFERENCE_GPU_HOURS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "workload.csv"
        write_workload(path, seed, ask=tuned_ask if tuned else requested)
        jobs = load_adaptdl(path, gpu_hours=hours).jobs
    # As `load_trace` does: the first submission is time 0.
    start = min(job.submit_s for job in jobs)
    return [replace(job, submit_s=job.submit_s - start) for job in jobs]


def avg_jct_h(jobs: list[JobSpec], policy: Policy, seed: int) -> float:
    cluster = load_cluster("16x4")
    sim = Simulator(
        cluster,
        jobs,
        policy,
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, seed=seed),
        trace_name=f"workload-{seed}",
    )
    jcts = [o.finish_s - o.submit_s for o in sim.run().jobs if o.finish_s is not None]
    return round(sum(jcts) / len(jcts) / 3600.0, 3)


Make = Callable[[], Policy]
VARIANTS: tuple[tuple[str, int, bool, float, Mapping[str, Make]], ...] = (
    ("as bench/pollux.py", 0, False, 1.0, {"tiresias": Tiresias, "optimus": Optimus}),
    (
        "Optimus admits least remaining time first",
        0,
        False,
        1.0,
        {"optimus": lambda: Optimus(admission="remaining")},
    ),
    (
        "Optimus resize hysteresis 0",
        0,
        False,
        1.0,
        {"optimus": lambda: Optimus(resize_hysteresis=0.0)},
    ),
    (
        "Tiresias as the Pollux evaluation ran it",
        0,
        False,
        1.0,
        {"tiresias": lambda: Tiresias(**POLLUX_EVAL_TIRESIAS)},
    ),
    (
        "the same, promotion on",
        0,
        False,
        1.0,
        {"tiresias": lambda: Tiresias(thresholds_gpu_s=(16 * 3600.0,))},
    ),
    ("job lengths x0.5", 0, False, 0.5, {"tiresias": Tiresias, "optimus": Optimus}),
    ("job lengths x0.3", 0, False, 0.3, {"tiresias": Tiresias, "optimus": Optimus}),
    (
        "tuned configurations, 2-queue Tiresias",
        0,
        True,
        1.0,
        {"tiresias": lambda: Tiresias(**POLLUX_EVAL_TIRESIAS), "optimus": Optimus},
    ),
    (
        "the same, seed 1",
        1,
        True,
        1.0,
        {"tiresias": lambda: Tiresias(**POLLUX_EVAL_TIRESIAS), "optimus": Optimus},
    ),
)


def across_seeds(n: int) -> None:
    makes: Mapping[str, Make] = {"tiresias": Tiresias, "optimus": Optimus, "srtf": Srtf}
    runs: dict[str, list[float]] = {name: [] for name in makes}
    for seed in range(n):
        jobs = jobs_for(seed, False, 1.0)
        for name, make in makes.items():
            runs[name].append(avg_jct_h(jobs, make(), seed))
        print(json.dumps({"seed": seed, "avg_jct_h": {k: v[-1] for k, v in runs.items()}}))
    means = {k: round(sum(v) / len(v), 3) for k, v in runs.items()}
    print(json.dumps({"seeds": n, "mean_avg_jct_h": means}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=0)
    args = parser.parse_args()
    if args.seeds > 0:
        across_seeds(args.seeds)
        return
    for change, seed, tuned, scale, policies in VARIANTS:
        jobs = jobs_for(seed, tuned, scale)
        figures = {name: avg_jct_h(jobs, make(), seed) for name, make in policies.items()}
        print(json.dumps({"change": change, "seed": seed, "avg_jct_h": figures}), flush=True)


if __name__ == "__main__":
    main()
