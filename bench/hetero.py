"""Heterogeneity benchmark (issue 31, Show): the Pollux paper's workloads on three GPU
types, Pollux choosing types against Pollux blind to them and against Gavel's LAS.

    .venv/bin/python bench/hetero.py [--workloads 1-8] [--policies pollux,...]

Replays the eight 160-job workloads of the Pollux evaluation
(`examples/traces/pollux/workload-N.csv`, shipped from the artifact) on
`examples/clusters/t4-v100-a100.yaml`: the Pollux testbed's 64 GPUs with half of them
newer, 8 servers of 4 T4, 2 DGX-1 of 8 V100 and 2 DGX A100 of 8 A100. Speeds per type are
the performance model's (controller.model.perf: the Pollux profiles' measured step
times on the T4s, the catalogue's speed against them on the V100s and A100s; no
throughput matrix), as the simulator runs them; 60 s rounds (Gavel's policies keep
their own 360 s rounds), the simulator's restart costs. For each workload and policy
variant it prints the average JCT and the makespan of the jobs that finished within
`MAX_TIME_S` (and the sizes of those that did not), restarts and the replay's wall
time, then the mean of each figure over the workloads per variant. `--processes N` runs N
replays at once (each replay is one process's; their figures do not depend on it).

Variants (`VARIANTS`): `pollux` (goodput per GPU type, policies/pollux/types.py) and
`pollux-blind` (`aware=false`: every GPU judged as the largest server's), `gavel-las` and
`gavel-las-blind` (Gavel's own aware and blind versions), and Tiresias, Optimus,
Gandiva, FIFO and SRTF, which place each job on its fastest type with room, each with
its `-blind` version (`aware=false`: the placer, or Optimus' packing, as on one type).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.registry import make_policy

ROOT = Path(__file__).resolve().parent.parent

# Run as a script, this file's folder comes first on sys.path: swap it for the project
# root so that the Pollux bench's workloads and their `--workloads` reader are shared.
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]
from bench.pollux import WORKLOADS, numbers  # noqa: E402  (after the path swap)

CLUSTER = ROOT / "examples" / "clusters" / "t4-v100-a100.yaml"
# Where a replay stops, a guard: every replay ends within 36 h of simulated time (Gavel's
# policies run the 48-GPU jobs of workloads 2 and 4-8 over several types since issue
# 31's gaps: the types have 32, 16 and 16 GPUs; before, those jobs never started).
MAX_TIME_S = 72 * 3600.0
# name -> (registered policy, options).
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "pollux": ("pollux", {}),
    "pollux-blind": ("pollux", {"aware": False}),
    "gavel-las": ("gavel-las", {}),
    "gavel-las-blind": ("gavel-las", {"aware": False}),
    "tiresias": ("tiresias", {}),
    "tiresias-blind": ("tiresias", {"aware": False}),
    "optimus": ("optimus", {}),
    "optimus-blind": ("optimus", {"aware": False}),
    "gandiva": ("gandiva", {}),
    "gandiva-blind": ("gandiva", {"aware": False}),
    "fifo": ("fifo", {}),
    "fifo-blind": ("fifo", {"aware": False}),
    "srtf": ("srtf", {}),
    "srtf-blind": ("srtf", {"aware": False}),
}


def replay(number: int, name: str, seed: int) -> dict[str, Any]:
    """One workload under one variant: its figures."""
    cluster = load_cluster(str(CLUSTER))
    trace = load_trace(WORKLOADS / f"workload-{number}.csv", "adaptdl")
    registered, options = VARIANTS[name]
    sim = Simulator(
        cluster,
        trace.jobs,
        make_policy(registered, **options),
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, seed=seed, max_time_s=MAX_TIME_S),
        trace_name=trace.name,
    )
    t0 = time.perf_counter()
    result = sim.run()
    wall_s = time.perf_counter() - t0
    jcts = [o.finish_s - o.submit_s for o in result.jobs if o.finish_s is not None]
    left = [o for o in result.jobs if o.finish_s is None]
    return {
        "workload": number,
        "policy": name,
        "finished": len(jcts),
        "unfinished_gpus": sorted(o.num_gpus for o in left),
        "avg_jct_s": round(sum(jcts) / len(jcts)) if jcts else None,
        "makespan_h": round(max(o.finish_s or 0.0 for o in result.jobs) / 3600.0, 2),
        "restarts": sum(o.restarts for o in result.jobs),
        "wall_s": round(wall_s, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", default="1-8")
    p.add_argument("--policies", default=",".join(VARIANTS))
    p.add_argument("--processes", type=int, default=1, help="replays run at once")
    args = p.parse_args()
    names = args.policies.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    runs = [(number, name, args.seed) for number in numbers(args.workloads) for name in names]
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(args.processes) as pool:
        # Printed as each finishes, so that a run cut short keeps what it did.
        for done in as_completed([pool.submit(replay, *run) for run in runs]):
            rows.append(done.result())
            print(json.dumps(rows[-1]), flush=True)
    means = {}
    for name in names:
        mine = [r for r in rows if r["policy"] == name]
        means[name] = {
            key: round(statistics.fmean(float(r[key]) for r in mine), 2)
            for key in ("avg_jct_s", "makespan_h", "restarts")
        }
    print(json.dumps({"mean_over_workloads": means}))


if __name__ == "__main__":
    main()
