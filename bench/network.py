"""Network benchmarks in replay: coflow sharing (issue 5) and communication phases (issue 19).

    .venv/bin/python bench/network.py [--jobs 400] [--load 0.9] [--seed 7]
    .venv/bin/python bench/network.py --phases [--jobs 300] [--clusters comm-heavy-25g,lingjun]

A communication-heavy workload: large-gradient models (VGG16, BERT, AlexNet, LM,
Transformer, GPT-2 and a few ResNet-50), mostly multi-node gangs (4 to 32 GPUs on
4-GPU servers), Poisson arrivals offering `--load` times the cluster's GPUs, on
examples/clusters/comm-heavy-25g.yaml: 4 racks x 8 servers x 4 V100-PCIe, one 25 GbE
NIC per server, racks 4:1 oversubscribed (50 Gbit/s uplinks). Each of FIFO and
Tiresias replays it with every (placement, network) pair of `COMBOS`; the goal is that
topology-aware + coflow-aware (sebf, sincronia) beats topology-unaware + fair sharing
(first-fit, random) in average JCT. Results are recorded in docs/benchmarks.md.

`--phases` (issue 19) replays the same kind of workload, on comm-heavy-25g, on the
Lingjun topology (`lingjun`: 8-GPU A100 hosts, 1.6 Tbit/s each) and on Lingjun's
topology with comm-heavy-25g's servers (`lingjun-25g`; `comm-heavy-25g-ecmp2` and
`lingjun-25g-ecmp2` are the same with every uplink as two ECMP lanes, where crux also
selects paths: docs/network.md, "ECMP lanes"), under the phase-level network
model (`network_model="phases"`) with Tiresias, Pollux and FIFO, each with one placer
(`--placement`, topology-aware by default) and the networks fair, cassini, crux and
mltcp, and prints average JCT, makespan and GPU utilisation (compute only: time a job
waits on a shared link keeps no GPU busy) against fair. It first runs CASSINI's
two-job experiment in the model (`two_job_experiment`) and prints, for the fair
replays, how much the phase model slows the average networked job over its links
alone (`contention`): the most any network policy can win back. `--networks` may
also name `alone`: the phase model with every job at its rate alone, as if no link
were shared (instrumentation: the group runs return each job's time alone), the
bound on what any network policy can win in JCT and utilisation with the same placer.
(`dedicated` is not that bound: it hands the rate model its own default rate, which
splits a rack's uplink among a job's nodes where a ring sends one flow across it.)

`--arrivals burst` submits every job at t = 0 instead of Poisson arrivals: a fixed
set of jobs on a backlogged cluster, the setting of CASSINI's and Crux's testbed
runs, where the makespan is set by the schedule rather than by the last arrival
(in an open trace the same work over a makespan the network barely moves keeps GPU
utilisation where it is). `util_backlog` is GPU utilisation over the time some job
waits for GPUs (the backlogged window): busy GPU-seconds, exact, between the rounds
after which a job waits and the next round, over the GPU-seconds of those stretches
(`_marking` in bench/network_phase_replay.py reads the simulator's busy integral at
each round; the queue changes only at rounds). While jobs queue the GPUs are taken,
and their busy share is what sharing the network decides.

This file is the command and the coflow-sharing replay (`replay`); the workloads and
clusters are bench/network_workload.py's, one `--phases` replay and its
instrumentation bench/network_phase_replay.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from controller.metrics import summarize
from controller.network.registry import PHASES, names
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from policies.registry import make_policy

# Run as a script, bench/ is on sys.path but the project root (for bench.*) may not be.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.network_phase_replay import phase_replay, two_job_experiment
from bench.network_workload import ARRIVALS, CLUSTER, WORKLOADS, workload

COMBOS = (
    ("first-fit", "fair"),
    ("random", "fair"),
    ("first-fit", "dedicated"),
    ("topology-aware", "fair"),
    ("topology-aware", "sebf"),
    ("topology-aware", "sincronia"),
)
POLICIES = ("fifo", "tiresias")
PHASE_POLICIES = ("tiresias", "pollux", "fifo")
PHASE_NETWORKS = names(PHASES)[1:]  # the registry's, without "dedicated"


def phases_main(args: argparse.Namespace) -> None:
    for line in two_job_experiment():
        print(line)
    clusters = args.clusters.split(",")
    placing = not args.no_cassini_placement
    tasks = [
        (
            c,
            mix,
            policy,
            args.placement,
            net,
            args.jobs,
            args.load,
            args.seed,
            placing,
            args.arrivals,
        )
        for c in clusters
        for mix in args.workloads.split(",")
        for policy in args.policies.split(",")
        for net in args.networks.split(",")
    ]
    print(
        f"{args.jobs} jobs, {args.arrivals} arrivals, load {args.load}, seed {args.seed}, "
        f"placement {args.placement}"
        f"{', cassini placement' if placing else ''}"
    )
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(phase_replay, tasks))
    for row in rows:
        print(json.dumps(row))
    print()
    print(
        f"{'cluster':15} {'workload':13} {'policy':9} {'network':8} {'avg JCT s':>10} "
        f"{'vs fair':>8} {'GPU util':>9} {'vs fair':>8} {'backlog':>8} {'vs fair':>8} "
        f"{'makespan s':>11} {'contention':>10} {'moved':>6}"
    )
    fair = {(r["cluster"], r["workload"], r["policy"]): r for r in rows if r["network"] == "fair"}
    for r in rows:
        base = fair.get((r["cluster"], r["workload"], r["policy"]), r)
        jct = r["avg_jct_s"] / base["avg_jct_s"] - 1.0
        util = r["gpu_util"] / base["gpu_util"] - 1.0
        backlog = r["util_backlog"] or 0.0
        gain = backlog / base["util_backlog"] - 1.0 if base["util_backlog"] else 0.0
        print(
            f"{r['cluster']:15} {r['workload']:13} {r['policy']:9} {r['network']:8} "
            f"{r['avg_jct_s']:>10} {jct:>+8.1%} {r['gpu_util']:>9} {util:>+8.1%} "
            f"{backlog:>8.4f} {gain:>+8.1%} "
            f"{r['makespan_s']:>11} {r['contention']:>10} {r['moved']:>6}"
        )


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
    p.add_argument("--phases", action="store_true", help="issue 19: the phase-level model")
    p.add_argument("--clusters", default="comm-heavy-25g,lingjun-25g,lingjun")
    p.add_argument("--placement", default="topology-aware")
    p.add_argument("--policies", default=",".join(PHASE_POLICIES), help="for --phases")
    p.add_argument(
        "--workloads", default="comm-heavy", help=f"for --phases: {', '.join(WORKLOADS)}"
    )
    p.add_argument("--networks", default=",".join(PHASE_NETWORKS), help="fair first")
    p.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default="poisson",
        help="for --phases: Poisson at --load, or every job at t = 0 (a backlogged cluster)",
    )
    p.add_argument(
        "--no-cassini-placement",
        action="store_true",
        help="cassini keeps the policy's placement (shifts only)",
    )
    args = p.parse_args()
    if args.phases:
        phases_main(args)
        return
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
