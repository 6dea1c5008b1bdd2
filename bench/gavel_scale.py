"""Gavel at scale (issue 31): 100,000 jobs on 2,048 GPUs of three types under gavel-las,
and what POP's partitioning costs in schedule quality.

    PYTHONPATH=. .venv/bin/python bench/gavel_scale.py [--jobs 100000] [--pop-k K]
        [--rate-per-h R] [--duration-scale S] [--seed 0] [--policy gavel-las]
    PYTHONPATH=. .venv/bin/python bench/gavel_scale.py --pop-loss [--ks 1,2,4]
    PYTHONPATH=. .venv/bin/python bench/gavel_scale.py --lp-times [--sizes 1000,...]

The replay: `--jobs` jobs drawn as Gavel's simulator draws them
(scheduler/utils.py `generate_job` with `generate_multi_gpu_jobs`, at Gavel c4fa400):
a job type drawn uniformly from the 26 of Gavel's throughput matrix, a scale factor of
1 GPU (70 %), 2 (10 %), 4 (15 %) or 8 (5 %) where the matrix measured the type at that
many (else 1: A3C, CycleGAN and Recommendation run on one), a run time on the V100 of
10^U[1.5, 3] minutes (80 %) or 10^U[3, 4] (20 %), times `--duration-scale`, and its
steps that run time at the V100's rate; Poisson arrivals at `--rate-per-h` jobs per
hour. Gavel's run times (16.8 h on average) at the rate that keeps 2,048 GPUs busy
(about 30 jobs an hour) would make a 100,000-job replay ~3,000 h of simulated time,
~30,000 rounds; `--duration-scale` (1/20 by default) shortens every job alike (50 min
on average), so the same shape of workload arrives 20x faster. At the default 1,400
jobs/h (arrivals over 71 h) the offered load is 0.95 of the cluster at V100 speed
(1.66 GPUs a job on average), more than the cluster serves on its slower P100s and
K80s, so a queue of thousands builds and the LP grows with it. The cluster is
examples/clusters/gavel-2048.yaml (680 V100, 684 P100, 684 K80 in servers of 4), the
rates Gavel's matrix
(`../shared/data/gavel/simulation_throughputs.json`), 360 s rounds, restarts free as
in Gavel's simulator. Every `schedule` call is timed; printed: the simulation's wall
and CPU time (the workload's generation and the imports left out), the rounds (every
`schedule` call, those between Gavel's rounds included), the median and largest
round's wall time, the largest's CPU time, the active jobs at it, average JCT and
makespan.

`--pop-loss`: minimize_makespan.trace on gavel-8-16-24 (bench/gavel.py's replay) under
gavel-las, gavel-ftf and gavel-makespan with `pop_k` each of `--ks`: average JCT and
makespan side by side, the loss of POP's partitioning against the full LP.

`--lp-times`: one LAS allocation (policies/gavel/allocation.py) of each of `--sizes`
jobs drawn from the replay's workload (their rates on V100, P100 and K80 from Gavel's
matrix, weights 1) on the 2,048 GPUs, timed (wall and CPU) as the full LP and with
POP's default k (policies/gavel/pop.py); beside each, the share of the GPUs its X
keeps busy and each job's throughput under X over its throughput alone on its fastest
type, mean and least (LAS's own objective is normalised by each problem's equal share,
which differs between the full problem and a part, so it is not compared here).
The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from controller.model import JobSpec
from controller.model.perf.matrix import load_matrix
from controller.placement import make_placer
from controller.rates import RateModel
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from controller.traces.formats.gavel import parse_job_type
from policies.gavel import allocation as gavel_allocation
from policies.gavel import pop as gavel_pop
from policies.registry import make_policy

# Run as a script, bench/ is on sys.path but the project root (for bench.*) may not be.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.policy_scale import TimedPolicy

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("/work/shared/data/gavel")
CLUSTER = ROOT / "examples/clusters/gavel-2048.yaml"
SMALL_CLUSTER = ROOT / "examples/clusters/gavel-8-16-24.yaml"
ROUND_S = 360.0
# Gavel's _generate_scale_factor: 1 below 0.7, 2 to 0.8, 4 to 0.95, else 8.
SCALE_FACTORS = ((0.7, 1), (0.8, 2), (0.95, 4), (1.0, 8))


def job_types(matrix_path: Path) -> dict[str, dict[int, float]]:
    """Gavel's job types -> {scale factor: steps/s on the V100} from its matrix file."""
    data = json.loads(matrix_path.read_text())
    types: dict[str, dict[int, float]] = {}
    for key, entry in data["v100"].items():
        name, gpus = key.strip("()").rsplit(", ", 1)
        types.setdefault(name.strip("'"), {})[int(gpus)] = float(entry["null"])
    return dict(sorted(types.items()))


def workload(
    num_jobs: int, seed: int, rate_per_h: float, duration_scale: float, matrix_path: Path
) -> list[JobSpec]:
    """The jobs of the module docstring, in arrival order."""
    types = job_types(matrix_path)
    names = list(types)
    rng = random.Random(seed)
    jobs = []
    arrival_s = 0.0
    for index in range(num_jobs):
        name = names[rng.randrange(len(names))]
        draw = rng.random()
        scale = next(s for bound, s in SCALE_FACTORS if draw < bound)
        if scale not in types[name]:
            scale = 1
        low, high = (3.0, 4.0) if rng.random() >= 0.8 else (1.5, 3.0)
        minutes = 10 ** rng.uniform(low, high)
        run_s = 60.0 * minutes * duration_scale
        model, batch = parse_job_type(name)
        jobs.append(
            JobSpec(
                job_id=f"gavel-{index}",
                submit_s=arrival_s,
                num_gpus=scale,
                model=model,
                batch_size=batch,
                iterations=max(1, round(run_s * types[name][scale])),
            )
        )
        arrival_s += -math.log(1.0 - rng.random()) * 3600.0 / rate_per_h
    return jobs


def bench_replay(args: argparse.Namespace) -> dict[str, object]:
    matrix_path = args.data / "simulation_throughputs.json"
    jobs = workload(args.jobs, args.seed, args.rate_per_h, args.duration_scale, matrix_path)
    cluster = load_cluster(str(args.cluster))
    options: dict[str, object] = {} if args.pop_k is None else {"pop_k": args.pop_k}
    policy = TimedPolicy(make_policy(args.policy, **options))
    sim = Simulator(
        cluster,
        jobs,
        policy,
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=ROUND_S, restart_s=0.0, validate_reasons=False),
        rates=RateModel(cluster, load_matrix(matrix_path)),
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    result = sim.run()
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    jcts = [o.finish_s - o.submit_s for o in result.jobs if o.finish_s is not None]
    worst = int(np.argmax(policy.wall_s))
    return {
        "policy": args.policy,
        "pop_k": args.pop_k,
        "jobs": len(jobs),
        "gpus": cluster.num_gpus,
        "finished": len(jcts),
        "avg_jct_h": round(sum(jcts) / len(jcts) / 3600, 2) if jcts else None,
        "makespan_h": round(max(o.finish_s or 0.0 for o in result.jobs) / 3600, 1),
        "rounds": len(policy.wall_s),
        "round_median_s": round(statistics.median(policy.wall_s), 4),
        "round_max_s": round(max(policy.wall_s), 3),
        "round_max_cpu_s": round(max(policy.cpu_s), 3),
        "active_at_max": policy.active[worst],
        "most_active": max(policy.active),
        "policy_s": round(sum(policy.wall_s), 1),
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
    }


def lp_times(args: argparse.Namespace) -> list[dict[str, object]]:
    """The `--lp-times` figures (module docstring)."""
    matrix_path = args.data / "simulation_throughputs.json"
    cluster = load_cluster(str(args.cluster))
    rates = RateModel(cluster, load_matrix(matrix_path))
    types = sorted({n.gpu_type.name for n in cluster.nodes})
    workers = np.array(
        [sum(n.num_gpus for n in cluster.nodes if n.gpu_type.name == t) for t in types], dtype=float
    )
    rows = []
    for size in (int(n) for n in args.sizes.split(",")):
        jobs = workload(size, args.seed, args.rate_per_h, args.duration_scale, matrix_path)
        t = np.array([[rates.type_rate_ips(j, g, j.num_gpus) or 0.0 for g in types] for j in jobs])
        scale = np.array([float(j.num_gpus) for j in jobs])
        best = t.max(axis=1)
        for k in (1, gavel_pop.default_k(size)):
            problem = functools.partial(_las, t, scale)
            start, cpu_start = time.perf_counter(), time.process_time()
            x = gavel_pop.partitioned(size, len(types), k, workers, problem)
            wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
            speed = (t * x).sum(axis=1) / best
            rows.append(
                {
                    "jobs": size,
                    "pop_k": k,
                    "wall_s": round(wall_s, 2),
                    "cpu_s": round(cpu_s, 2),
                    "gpus_busy": round(float((scale[:, None] * x).sum() / workers.sum()), 4),
                    "mean_speed": round(float(speed.mean()), 4),
                    "least_speed": round(float(speed.min()), 4),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            if k == 1 and gavel_pop.default_k(size) == 1:
                break
    return rows


def _las(
    t: gavel_pop.Matrix, scale: gavel_pop.Matrix, rows: gavel_pop.Rows, workers: gavel_pop.Matrix
) -> gavel_pop.Matrix:
    ones = np.ones(len(rows))
    return gavel_allocation.max_min_fairness(t[rows], scale[rows], ones, workers, aware=True)


def pop_loss(data: Path, policy: str, pop_k: int) -> dict[str, object]:
    """minimize_makespan.trace on gavel-8-16-24 (bench/gavel.py) with POP's k."""
    trace = load_trace(str(data / "minimize_makespan.trace"), "gavel")
    cluster = load_cluster(str(SMALL_CLUSTER))
    sim = Simulator(
        cluster,
        trace.jobs,
        make_policy(policy, pop_k=pop_k),
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=ROUND_S, restart_s=0.0),
        rates=RateModel(cluster, load_matrix(data / "simulation_throughputs.json")),
    )
    result = sim.run()
    finish = [o.finish_s for o in result.jobs if o.finish_s is not None]
    if len(finish) != len(result.jobs):
        raise RuntimeError(f"{policy} pop_k={pop_k}: unfinished jobs")
    return {
        "policy": policy,
        "pop_k": pop_k,
        "avg_jct_h": round(sum(finish) / len(finish) / 3600, 2),
        "makespan_h": round(max(finish) / 3600, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--cluster", type=Path, default=CLUSTER)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate-per-h", type=float, default=1400.0)
    parser.add_argument("--duration-scale", type=float, default=1 / 20)
    parser.add_argument("--policy", default="gavel-las")
    parser.add_argument("--pop-k", type=int, default=None, help="default: by size")
    parser.add_argument("--pop-loss", action="store_true")
    parser.add_argument("--ks", default="1,2,4")
    parser.add_argument("--lp-times", action="store_true")
    parser.add_argument("--sizes", default="500,1000,2000,4000,8000")
    args = parser.parse_args(argv)
    if args.lp_times:
        lp_times(args)
        return 0
    if args.pop_loss:
        for policy in ("gavel-las", "gavel-ftf", "gavel-makespan"):
            for k in (int(k) for k in args.ks.split(",")):
                print(json.dumps(pop_loss(args.data, policy, k)), flush=True)
        return 0
    print(json.dumps(bench_replay(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
