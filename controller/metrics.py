"""Figures of merit for one replay: job completion times, queueing, usage, fairness.

Called by the CLI and controller.report on the `ReplayResult` the simulator returns;
pure functions of that record, so a saved replay can be summarised again later.

Conventions:

- Percentiles use numpy's "linear" method (type 7 of Hyndman and Fan, 1996).
- A statistic over an empty set (say p99 JCT when no job finished) is None, which
  JSON writes as null; no figure is ever NaN or infinite.
- Finish-time fairness rho follows Themis (Mahajan et al., NSDI 2020, §3),
  rho = T_shared / T_independent, with T_independent approximated as described in
  `independent_time_s`.
- Jain's index (Jain, Chiu, Hawe, DEC-TR-301, 1984) is taken over the per-job
  values 1/rho; see `jain_index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from controller.records import JobOutcome, ReplayResult

HEADLINE_KEYS = (
    "policy",
    "jobs",
    "avg_jct_s",
    "p99_jct_s",
    "makespan_s",
    "gpu_utilization",
    "wall_s",
)


@dataclass(frozen=True, slots=True)
class Summary:
    """One replay in figures. `to_dict` keys are the field names, in this order.

    Times are seconds; ratios are in [0, 1] except rho, which is unbounded above.
    """

    jobs: int
    finished: int
    unfinished: int
    started: int  # jobs that ran at least once; the population of the queueing figures
    avg_jct_s: float | None
    median_jct_s: float | None
    p95_jct_s: float | None
    p99_jct_s: float | None
    avg_queueing_s: float | None
    median_queueing_s: float | None
    p95_queueing_s: float | None
    p99_queueing_s: float | None
    makespan_s: float
    cluster_gpus: int  # the most GPUs up at any sample; the N-way share's denominator
    gpu_allocation: float
    gpu_utilization: float
    preemptions: int
    restarts: int
    ftf_jobs: int  # jobs with a defined rho; the population of the fairness figures
    avg_ftf_rho: float | None
    max_ftf_rho: float | None
    frac_ftf_rho_gt_1: float | None
    jain_index: float | None

    def to_dict(self) -> dict[str, int | float | None]:
        return asdict(self)


def summarize(result: ReplayResult) -> Summary:
    """Compute every figure of `result`; see the module docstring for conventions."""
    jobs = result.jobs
    jcts = [j.jct_s for j in jobs if j.jct_s is not None]
    waits = [j.queueing_s for j in jobs if j.queueing_s is not None]
    avg_jct, median_jct, p95_jct, p99_jct = _distribution(jcts)
    avg_wait, median_wait, p95_wait, p99_wait = _distribution(waits)
    rhos = list(finish_time_fairness(result).values())
    return Summary(
        jobs=len(jobs),
        finished=len(jcts),
        unfinished=len(jobs) - len(jcts),
        started=len(waits),
        avg_jct_s=avg_jct,
        median_jct_s=median_jct,
        p95_jct_s=p95_jct,
        p99_jct_s=p99_jct,
        avg_queueing_s=avg_wait,
        median_queueing_s=median_wait,
        p95_queueing_s=p95_wait,
        p99_queueing_s=p99_wait,
        makespan_s=makespan_s(result),
        cluster_gpus=cluster_gpus(result),
        gpu_allocation=_ratio(result.gpu_s_allocated, result.gpu_s_capacity),
        gpu_utilization=_ratio(result.gpu_s_busy, result.gpu_s_capacity),
        preemptions=sum(j.preemptions for j in jobs),
        restarts=sum(j.restarts for j in jobs),
        ftf_jobs=len(rhos),
        avg_ftf_rho=float(np.mean(rhos)) if rhos else None,
        max_ftf_rho=max(rhos) if rhos else None,
        frac_ftf_rho_gt_1=sum(r > 1.0 for r in rhos) / len(rhos) if rhos else None,
        jain_index=jain_index([1.0 / r for r in rhos]),
    )


def deadline_fields(result: ReplayResult) -> dict[str, int | float]:
    """The deadline figures `replay --json` and `compare --json` add when the trace
    has deadlines (else nothing): `deadline_jobs` (jobs with a deadline),
    `deadlines_met` (those finished by it) and `deadline_ratio`, met over all of them,
    a job refused at admission or unfinished counted as missed (ElasticFlow's
    "deadline satisfactory ratio", Gu et al., ASPLOS 2023, §6.1)."""
    met = [job.deadline_met is True for job in result.jobs if job.deadline_s is not None]
    if not met:
        return {}
    return {
        "deadline_jobs": len(met),
        "deadlines_met": sum(met),
        "deadline_ratio": sum(met) / len(met),
    }


def headline(summary: Summary, policy: str, wall_s: float) -> dict[str, object]:
    """The few figures the CLI prints with --json; the keys are `HEADLINE_KEYS`, a contract."""
    return {
        "policy": policy,
        "jobs": summary.jobs,
        "avg_jct_s": summary.avg_jct_s,
        "p99_jct_s": summary.p99_jct_s,
        "makespan_s": summary.makespan_s,
        "gpu_utilization": summary.gpu_utilization,
        "wall_s": wall_s,
    }


def makespan_s(result: ReplayResult) -> float:
    """From the first submission to the last finish.

    While some job is unfinished the replay's end is the later of the last finish
    and the last timeline sample. 0 with no jobs, or with nothing to end at.
    """
    if not result.jobs:
        return 0.0
    first_submit_s = min(j.submit_s for j in result.jobs)
    ends = [j.finish_s for j in result.jobs if j.finish_s is not None]
    if len(ends) < len(result.jobs) and result.timeline:
        ends.append(result.timeline[-1].t_s)
    return max(0.0, max(ends) - first_submit_s) if ends else 0.0


def cluster_gpus(result: ReplayResult) -> int:
    """The most GPUs up at any timeline sample; 0 with an empty timeline."""
    return max((s.gpus_total for s in result.timeline), default=0)


def independent_time_s(job: JobOutcome, total_gpus: int) -> float:
    """T_independent: the job's run time alone on a 1/N share of `total_gpus` GPUs.

    Themis (§3) runs the job on 1/N of the cluster, N being the average contention
    over its life. We approximate with GPU counts only: N = max(1, contention_avg)
    (the job itself is always one of the contenders) and the share is
    total_gpus / N GPUs. A gang fitting in its share runs at its nominal speed: it
    cannot use more GPUs than it asked for. A gang larger than its share gets it by
    time slicing, stretching its run by num_gpus / share:

        T_id = nominal_s * max(1, num_gpus * N / total_gpus)

    Deviations from Themis: placement within the share is not modelled (`nominal_s`
    already assumes the best placement), and total_gpus is the peak capacity, so
    time with nodes down counts against the schedule, not the share.
    """
    contention = max(1.0, job.contention_avg)
    return job.nominal_s * max(1.0, job.num_gpus * contention / total_gpus)


def finish_time_fairness(result: ReplayResult) -> dict[str, float]:
    """rho = JCT / T_independent per job id, for the jobs where it is defined.

    Defined for finished jobs with a positive JCT and nominal run time, in a
    replay whose timeline shows some GPUs (else there is no share to speak of).
    rho <= 1 means the job did at least as well as on its fair share.
    """
    total_gpus = cluster_gpus(result)
    if total_gpus <= 0:
        return {}
    rhos: dict[str, float] = {}
    for job in result.jobs:
        jct = job.jct_s
        if jct is None or jct <= 0.0 or job.nominal_s <= 0.0:
            continue
        rhos[job.job_id] = jct / independent_time_s(job, total_gpus)
    return rhos


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 when all equal, 1/n when one takes all.

    The paper (§3) applies it to each user's allocation divided by its fair
    allocation; we pass 1/rho = T_independent / T_shared, a job's rate of progress
    relative to its fair-share rate, which is that same normalised quantity. Over
    jobs, not tenants: the outcome records a tenant, but a tenant's fair share is
    not defined by the simulator. None for no values or all zeros.
    """
    x = np.asarray(values, dtype=float)
    square_sum = float(np.sum(x * x))
    if x.size == 0 or square_sum == 0.0:
        return None
    return float(np.sum(x)) ** 2 / (x.size * square_sum)


def _distribution(
    values: Sequence[float],
) -> tuple[float | None, float | None, float | None, float | None]:
    """Mean, median, p95 and p99, or all None for no values."""
    if not values:
        return None, None, None, None
    x = np.asarray(values, dtype=float)
    median, p95, p99 = np.percentile(x, [50.0, 95.0, 99.0], method="linear")
    return float(np.mean(x)), float(median), float(p95), float(p99)


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0.0 else 0.0
