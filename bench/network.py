"""Network benchmark (issue 5, Show): topology- and coflow-aware vs unaware, in replay.

    .venv/bin/python bench/network.py [--jobs 400] [--load 0.9] [--seed 7]

A communication-heavy workload: large-gradient models (VGG16, BERT, AlexNet, LM,
Transformer, GPT-2 and a few ResNet-50), mostly multi-node gangs (4 to 32 GPUs on
4-GPU servers), Poisson arrivals offering `--load` times the cluster's GPUs, on
examples/clusters/comm-heavy-25g.yaml: 4 racks x 8 servers x 4 V100-PCIe, one 25 GbE
NIC per server, racks 4:1 oversubscribed (50 Gbit/s uplinks). Each of FIFO and
Tiresias replays it with every (placement, network) pair of `COMBOS`; the goal is that
topology-aware + coflow-aware (sebf, sincronia) beats topology-unaware + fair sharing
(first-fit, random) in average JCT. Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from controller.metrics import summarize
from controller.model import JobSpec
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from policies.registry import make_policy

CLUSTER = str(Path(__file__).resolve().parent.parent / "examples/clusters/comm-heavy-25g.yaml")
# (model, share): large gradients dominate; ResNet-50 and GPT-2 are compute-bound here.
MODELS = {
    "vgg16": 0.25,
    "bert": 0.15,
    "alexnet": 0.15,
    "lm": 0.15,
    "transformer": 0.15,
    "gpt2": 0.05,
    "resnet50": 0.10,
}
# Gang sizes: one server (4), two (8), four (16), eight (32); a few small jobs that
# fragment the servers for the topology-unaware placers.
GANGS = {1: 0.05, 2: 0.05, 4: 0.2, 8: 0.35, 16: 0.25, 32: 0.1}
COMBOS = (
    ("first-fit", "fair"),
    ("random", "fair"),
    ("first-fit", "dedicated"),
    ("topology-aware", "fair"),
    ("topology-aware", "sebf"),
    ("topology-aware", "sincronia"),
)
POLICIES = ("fifo", "tiresias")


def workload(num_jobs: int, *, seed: int, cluster_gpus: int, load: float) -> list[JobSpec]:
    """Seeded jobs: log-uniform 10 min - 4 h at their gang size, Poisson arrivals."""
    rng = np.random.default_rng(seed)
    models = rng.choice(list(MODELS), size=num_jobs, p=list(MODELS.values()))
    gangs = rng.choice(list(GANGS), size=num_jobs, p=list(GANGS.values()))
    durations = np.exp(rng.uniform(np.log(600.0), np.log(4 * 3600.0), size=num_jobs))
    mean_gpu_s = float(np.mean(gangs * durations))
    gap_s = mean_gpu_s / (load * cluster_gpus)
    arrivals = np.cumsum(rng.exponential(gap_s, size=num_jobs))
    return [
        JobSpec(
            job_id=f"job{i:04d}",
            submit_s=round(float(arrivals[i]), 3),
            num_gpus=int(gangs[i]),
            model=str(models[i]),
            duration_s=round(float(durations[i]), 1),
        )
        for i in range(num_jobs)
    ]


def replay(task: tuple[str, str, str, int, float, int]) -> dict[str, Any]:
    policy, placement, network, num_jobs, load, seed = task
    cluster = load_cluster(CLUSTER)
    jobs = workload(num_jobs, seed=seed, cluster_gpus=cluster.num_gpus, load=load)
    sim = Simulator(
        cluster,
        jobs,
        make_policy(policy),
        make_placer(placement, cluster, seed),
        SimConfig(round_interval_s=60.0, seed=seed, network=network),
    )
    t0 = time.perf_counter()
    result = sim.run()
    wall_s = time.perf_counter() - t0
    summary = summarize(result)
    return {
        "policy": policy,
        "placement": placement,
        "network": network,
        "avg_jct_s": round(summary.avg_jct_s or 0.0, 1),
        "p99_jct_s": round(summary.p99_jct_s or 0.0, 1),
        "makespan_s": round(summary.makespan_s, 1),
        "finished": summary.finished,
        "rate_updates": sim.network_updates,
        "wall_s": round(wall_s, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=400)
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    tasks = [
        (policy, placement, network, args.jobs, args.load, args.seed)
        for policy in POLICIES
        for placement, network in COMBOS
    ]
    print(f"{args.jobs} jobs, load {args.load}, seed {args.seed}, cluster {Path(CLUSTER).name}")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(replay, tasks))
    for row in rows:
        print(json.dumps(row))
    print()
    print(f"{'policy':9} {'placement':15} {'network':10} {'avg JCT s':>10} {'p99 JCT s':>10}")
    for row in rows:
        print(
            f"{row['policy']!s:9} {row['placement']!s:15} {row['network']!s:10} "
            f"{row['avg_jct_s']:>10} {row['p99_jct_s']:>10}"
        )
    for policy in POLICIES:
        mine = {
            (r["placement"], r["network"]): r["avg_jct_s"] for r in rows if r["policy"] == policy
        }
        aware = min(mine["topology-aware", n] for n in ("sebf", "sincronia"))
        unaware = min(mine["first-fit", "fair"], mine["random", "fair"])
        verdict = "yes" if aware < unaware else "NO"
        print(f"{policy}: aware {aware} < unaware {unaware}: {verdict}")


if __name__ == "__main__":
    main()
