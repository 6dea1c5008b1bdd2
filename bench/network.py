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
topology with comm-heavy-25g's servers (`lingjun-25g`), under the phase-level network
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
(`_marking` reads the simulator's busy integral at each round; the queue changes only
at rounds). While jobs queue the GPUs are taken, and their busy share is what sharing
the network decides.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from controller.metrics import summarize
from controller.model import Cluster, JobSpec, JobStatus
from controller.network import phase_jobs
from controller.network.cassini import compatibility
from controller.network.cassini_placement import CassiniPlacer, wrap
from controller.network.phases import PhaseJob, periodic_iterations, shared_link_iteration_s
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from controller.sim.accounting import Accounts
from controller.sim.job import SimJob
from controller.spec import load_cluster
from controller.spec.clos import lingjun_cluster
from controller.spec.yaml_spec import presets
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
# The papers' setting (CASSINI NSDI 2024 §5, Crux SIGCOMM 2024 §6): each job spends a
# minority of its iteration on the wire, so jobs sharing an oversubscribed uplink can
# take turns. On comm-heavy-25g at their rate alone these models' bursts take (2, 4
# nodes): ResNet-50 25/45 %, Inception-v3 18/37 %, A3C 17/25 %, CycleGAN 45/60 %,
# VGG16 48/64 % of an iteration; gangs of 2-4 servers keep them there.
TESTBED_MODELS = {"resnet50": 0.35, "inception3": 0.25, "a3c": 0.1, "cyclegan": 0.15, "vgg16": 0.15}
TESTBED_GANGS = {4: 0.1, 8: 0.45, 16: 0.35, 32: 0.1}
# Lingjun with jobs that cross ToRs (about 7 hosts each) and groups (about 40 ToRs):
# 32-256 GPUs, the comm-heavy models.
LINGJUN_GANGS = {32: 0.2, 64: 0.3, 128: 0.3, 256: 0.2}
WORKLOADS: dict[str, tuple[dict[str, float], dict[int, float]]] = {
    "comm-heavy": (MODELS, GANGS),
    "testbed": (TESTBED_MODELS, TESTBED_GANGS),
    "lingjun-large": (MODELS, LINGJUN_GANGS),
}
POLICIES = ("fifo", "tiresias")
PHASE_POLICIES = ("tiresias", "pollux", "fifo")
PHASE_NETWORKS = ("fair", "cassini", "crux", "mltcp")


def _lingjun_25g() -> Cluster:
    """Lingjun's topology with comm-heavy-25g's servers (4 V100-PCIe, one 25 GbE NIC)
    and oversubscription (ToRs 4:1), groups 2:1: a communication-heavy Lingjun."""
    return lingjun_cluster(presets()[1]["pcie4"], tor_oversubscription=4.0)


CLUSTERS: dict[str, Callable[[], Cluster]] = {
    "comm-heavy-25g": lambda: load_cluster(CLUSTER),
    "lingjun": lambda: load_cluster("lingjun"),
    "lingjun-25g": _lingjun_25g,
}


ARRIVALS = ("poisson", "burst")


def workload(
    num_jobs: int,
    *,
    seed: int,
    cluster_gpus: int,
    load: float,
    mix: str = "comm-heavy",
    arrivals: str = "poisson",
) -> list[JobSpec]:
    """Seeded jobs of `WORKLOADS[mix]`: log-uniform 10 min - 4 h at their gang size,
    Poisson arrivals offering `load` (or all at t = 0 for `arrivals="burst"`; the
    same jobs either way)."""
    if arrivals not in ARRIVALS:
        raise ValueError(f"unknown arrivals {arrivals!r} (known: {', '.join(ARRIVALS)})")
    model_mix, gang_mix = WORKLOADS[mix]
    rng = np.random.default_rng(seed)
    models = rng.choice(list(model_mix), size=num_jobs, p=list(model_mix.values()))
    gangs = rng.choice(list(gang_mix), size=num_jobs, p=list(gang_mix.values()))
    durations = np.exp(rng.uniform(np.log(600.0), np.log(4 * 3600.0), size=num_jobs))
    mean_gpu_s = float(np.mean(gangs * durations))
    gap_s = mean_gpu_s / (load * cluster_gpus)
    times_s = np.cumsum(rng.exponential(gap_s, size=num_jobs))
    return [
        JobSpec(
            job_id=f"job{i:04d}",
            submit_s=round(float(times_s[i]), 3) if arrivals == "poisson" else 0.0,
            num_gpus=int(gangs[i]),
            model=str(models[i]),
            duration_s=round(float(durations[i]), 1),
        )
        for i in range(num_jobs)
    ]


def two_job_experiment() -> list[str]:
    """CASSINI's two-job experiment (NSDI 2024, §2, Fig. 2) in the phase model: two
    identical jobs on one 25 Gbit/s link, compute 60 ms then 125 MB (40 ms alone),
    started together (fair sharing, bursts collide) vs shifted by half a period."""
    compute_s, comm_mb, gbps = 0.060, 125.0, 25.0
    alone = compute_s + comm_mb / 125.0 / gbps
    in_phase = shared_link_iteration_s([compute_s] * 2, [comm_mb] * 2, [0.0, 0.0], gbps)
    shifted = shared_link_iteration_s([compute_s] * 2, [comm_mb] * 2, [0.0, alone / 2], gbps)
    periods = {"a": alone, "b": alone}
    scores = [
        compatibility(
            [
                PhaseJob("a", compute_s, comm_mb, ("l",)),
                PhaseJob("b", compute_s, comm_mb, ("l",), offset_s=shift),
            ],
            periods,
            gbps,
        )
        for shift in (0.0, alone / 2)
    ]
    return [
        f"two jobs, compute {compute_s * 1e3:.0f} ms + {comm_mb:.0f} MB on {gbps:g} Gbit/s "
        f"(alone {alone * 1e3:.1f} ms/iteration):",
        f"  in phase, fair: {in_phase[0] * 1e3:.1f} ms; shifted by half a period: "
        f"{shifted[0] * 1e3:.1f} ms; speed-up {in_phase[0] / shifted[0]:.3f}x",
        f"  CASSINI compatibility score: in phase {scores[0]:.2f}, shifted {scores[1]:.2f}",
    ]


@dataclass(frozen=True, slots=True)
class RoundMark:
    """After a round: its time, GPUs up, busy GPU-seconds so far (exact), jobs waiting."""

    t_s: float
    gpus: int
    busy_gpu_s: float
    queued: int


def backlogged_utilization(marks: Sequence[RoundMark]) -> float | None:
    """Busy GPU-seconds over GPU-seconds in the stretches from a round after which
    some job waits to the next round; None if no job ever waited."""
    busy_s = total_s = 0.0
    for mark, after in itertools.pairwise(marks):
        if mark.queued > 0:
            busy_s += after.busy_gpu_s - mark.busy_gpu_s
            total_s += mark.gpus * (after.t_s - mark.t_s)
    return busy_s / total_s if total_s > 0 else None


def phase_replay(
    task: tuple[str, str, str, str, str, int, float, int, bool, str],
) -> dict[str, Any]:
    (
        cluster_name,
        mix,
        policy,
        placement,
        network,
        num_jobs,
        load,
        seed,
        cassini_placement,
        arrivals,
    ) = task
    cluster = CLUSTERS[cluster_name]()
    jobs = workload(
        num_jobs, seed=seed, cluster_gpus=cluster.num_gpus, load=load, mix=mix, arrivals=arrivals
    )
    placer = make_placer(placement, cluster, seed)
    if cassini_placement:
        placer = wrap(placer, cluster, network)
    sim = Simulator(
        cluster,
        jobs,
        make_policy(policy),
        placer,
        SimConfig(
            round_interval_s=60.0,
            seed=seed,
            network="fair" if network == "alone" else network,
            network_model="phases",
        ),
    )
    slowdowns: list[float] = []
    t0 = time.perf_counter()
    marks: list[RoundMark] = []
    with _recording(slowdowns, alone=network == "alone"), _marking(marks):
        result = sim.run()
    wall_s = time.perf_counter() - t0
    summary = summarize(result)
    backlog = backlogged_utilization(marks)
    return {
        "cluster": cluster_name,
        "workload": mix,
        "arrivals": arrivals,
        "policy": policy,
        "placement": placement,
        "network": network,
        "avg_jct_s": round(summary.avg_jct_s or 0.0, 1),
        "makespan_s": round(summary.makespan_s, 1),
        "gpu_util": round(summary.gpu_utilization, 4),
        "util_backlog": None if backlog is None else round(backlog, 4),
        "contention": round(float(np.mean(slowdowns)) if slowdowns else 1.0, 4),
        "moved": placer.moved if isinstance(placer, CassiniPlacer) else 0,
        "finished": summary.finished,
        "wall_s": round(wall_s, 2),
    }


def _marking(marks: list[RoundMark]) -> contextlib.AbstractContextManager[object]:
    """Append a `RoundMark` after every round (instrumentation: wraps the accounts'
    timeline sample, adding each running job's busy stretch not yet closed)."""
    original = Accounts.sample

    def sample(
        acc: Accounts, now_s: float, active: dict[str, SimJob], running: int, frag: int
    ) -> None:
        original(acc, now_s, active, running, frag)
        open_s = sum(
            job.busy_gpus * max(0.0, now_s - max(job.busy_mark_s, job.resume_s))
            for job in active.values()
            if job.status is JobStatus.RUNNING
        )
        queued = acc.timeline[-1].queued
        marks.append(RoundMark(now_s, acc.alive_gpus, acc.busy_gpu_s + open_s, queued))

    return mock.patch.object(Accounts, "sample", sample)


def _recording(
    slowdowns: list[float], *, alone: bool = False
) -> contextlib.AbstractContextManager[object]:
    """Collect each networked job's phase-model iteration time over its time alone
    (instrumentation: wraps the phase model's event loop as phase_jobs calls it);
    with `alone`, the loop is skipped and every job gets its time alone."""

    def recorded(
        jobs: Sequence[PhaseJob], capacities: Mapping[Hashable, float], sharing: str
    ) -> dict[str, float]:
        solo = {
            job.job_id: job.compute_s + job.comm_mb / 125.0 / min(capacities[x] for x in job.links)
            for job in jobs
        }
        times = solo if alone else periodic_iterations(jobs, capacities, sharing)
        slowdowns.extend(times[jid] / solo[jid] for jid in solo)
        return times

    return mock.patch.object(phase_jobs, "periodic_iterations", recorded)


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
