"""Crux's GPU-intensity priorities: jobs that keep more GPUs busy per byte go first.

Crux (Cao et al., SIGCOMM 2024) shows that, over a long horizon, a cluster's GPU
utilisation equals the GPU intensity carried over its bottleneck links (§3.2,
Theorem 1), with a job's intensity (Eq. 2)

    I_j = W_j / t_j,    t_j = max_e M_{j,e} / B_e

W_j its computation per iteration and t_j the time its iteration's traffic M_{j,e}
takes on its slowest link e of bandwidth B_e. Crux orders jobs by intensity, picks
paths in that order (§4.1) and maps the order onto the few priority levels the
switches offer (§4.2-4.3).

`priorities` is called by `controller.network.phases.jobs` whenever the set of running
multi-node jobs changes; the phase model then shares each link by strict priority
(`controller.network.phases`, rule `priority`).

Deviations: W_j is GPU-seconds of exposed compute per iteration (GPUs x compute
phase) rather than FLOPs; the correction k_j of Eq. 3 (for jobs whose iteration
time the priority itself changes) is 1; priority compression (§4.3, a search that
keeps apart the jobs that contend most) is replaced by equal-count bands over the
intensity order (jobs of equal intensity share a level: Crux's order cannot tell
them apart); path selection (§4.1) is controller.network.phases.crux_paths, and has a choice
to make only where a tier has ECMP lanes (controller.network.ecmp; a tier of one lane
is ideal spreading, which no choice beats). Strict priority starves a level whose
link the higher levels keep busy (their bursts together never end on an overloaded
uplink); each job keeps `PRIORITY_FLOOR` of its rate alone, as the live enforcement
does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Crux's testbed switches expose 8 priority queues; Crux reserves some for other
# traffic and evaluates with a handful of levels (§6). gpuflow uses 4.
PRIORITY_LEVELS = 4
# A job's guaranteed share of its rate alone under any higher level: live, an HTB
# class's rate beneath its priority, so that a lower level's TCP connections keep
# their ACK clock (the netexp link measured priorities with this 1 % floor:
# docs/network.md); in replay, `phases`' floor for the `priority` rule.
PRIORITY_FLOOR = 0.01


@dataclass(frozen=True, slots=True)
class Intensity:
    """A job's GPU-seconds of compute per iteration and its bottleneck transfer time."""

    job_id: str
    gpu_compute_s: float
    bottleneck_s: float

    @property
    def value(self) -> float:
        if self.bottleneck_s <= 0:
            return float("inf")
        return self.gpu_compute_s / self.bottleneck_s


def bottleneck_s(comm_mb: float, capacities_gbps: Sequence[float]) -> float:
    """t_j of Eq. 2: the iteration's MB over the slowest of the job's links."""
    return max((comm_mb / 125.0 / c for c in capacities_gbps), default=0.0)


def intensity_order(jobs: Sequence[Intensity]) -> list[Intensity]:
    """Most intense first (ties: by id): the order of priorities and of path selection."""
    return sorted(jobs, key=lambda j: (-j.value, j.job_id))


def priorities(jobs: Sequence[Intensity], levels: int = PRIORITY_LEVELS) -> dict[str, int]:
    """Priority level per job, `levels - 1` (highest) for the most intense band.

    Jobs are ordered by intensity (ties: id) and cut into `levels` bands of equal
    count (the first bands take the remainder); a job as intense as the one before
    it joins that one's band."""
    if levels < 1:
        raise ValueError(f"levels must be >= 1, got {levels}")
    order = intensity_order(jobs)
    out: dict[str, int] = {}
    n = len(order)
    band = 0
    for rank, job in enumerate(order):
        if rank == 0 or job.value != order[rank - 1].value:
            band = rank * levels // n
        out[job.job_id] = levels - 1 - band
    return out


def intensities(
    gpus: Mapping[str, int],
    compute_s: Mapping[str, float],
    comm_mb: Mapping[str, float],
    link_gbps: Mapping[str, Sequence[float]],
) -> list[Intensity]:
    """Intensity records from per-job GPUs, exposed compute, MB per link and link capacities."""
    return [
        Intensity(jid, gpus[jid] * compute_s[jid], bottleneck_s(comm_mb[jid], link_gbps[jid]))
        for jid in sorted(gpus)
    ]
