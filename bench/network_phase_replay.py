"""One replay of `bench/network.py --phases` (issue 19), and what it measures.

Called by bench/network.py's `phases_main`, which maps `phase_replay` over a pool of
processes (one task per cluster, workload, policy and network) and prints the table;
tests/bench/test_network.py checks the burst arrivals and the backlogged window.
`two_job_experiment` is CASSINI's two-job experiment in the model. Around the replay
two pieces of instrumentation patch the simulator for its duration: `_recording`
collects each networked job's phase-model slowdown over its time alone (the
`contention` column; with network `alone`, it gives every job that time), and
`_marking` records a `RoundMark` after every round, from which
`backlogged_utilization` computes `util_backlog` (bench/network.py's docstring).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

from bench.network_workload import CLUSTERS, workload
from controller.metrics import summarize
from controller.model import JobStatus
from controller.network.phases import PhaseJob, periodic_iterations, shared_link_iteration_s
from controller.network.phases import jobs as phase_jobs
from controller.network.phases.cassini import compatibility
from controller.network.phases.cassini_placement import CassiniPlacer
from controller.network.registry import wrap_placer
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from controller.sim.accounting import Accounts
from controller.sim.job import SimJob
from policies.registry import make_policy


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
        placer = wrap_placer(placer, cluster, network)
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
