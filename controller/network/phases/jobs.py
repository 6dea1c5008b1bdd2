"""Multi-node DL jobs under the phase-level network model (`--network-model phases`).

The job simulator (controller.sim.bandwidth) calls `phase_job_rates` whenever the set
of running multi-node jobs changes, instead of `controller.network.jobs.job_rates`
(the steady model). Each job's iteration alone takes T = iteration_s(d) at d, its
slowest link's capacity (the NIC, or the rack uplink when its ring leaves the rack);
its ring sends one flow of V MB per iteration over each link it crosses
(`jobs.ring_flows`). The iteration is split into

    burst  B = V / (125 d)  seconds at d      (all of T if V / (125 d) > T)
    compute  T - B                             (the compute the all-reduce does not hide)

so the overlap of gradient buckets with the backward pass that the performance
model assumes (its gamma) stays inside T - B. Jobs linked through shared links
(transitively) are run together by `phases.periodic_iterations`; a job that shares
no link gets d, and so exactly the steady model's iteration time (analytic: no
events). A job's mean iteration time T' in its group is handed back as the rate b
with iteration_s(b) = T', so the simulator's rate model needs no second form.

The network's phase form (controller.network.phases.form, given by the network
registry, controller.network.registry, which tabulates the networks) sets the
phases' offsets, the sharing rule and any priority levels: without `time_shifts` a
job's iterations follow each other from its (re)start, uncoordinated; with them
(cassini) a group's jobs are shifted as the form says. With `levels` (crux) each job
of a group gets its level from the jobs' GPU intensities and keeps `floor_share` of
its rate alone whatever the higher levels send (the floor the operator enforces live).

Links are the ring's (`jobs.ring_flows`): where a tier has ECMP lanes
(controller.network.ecmp) each hop takes the lane hashing gives it, or, with the
form's `paths` (crux), the one its path selection chooses, routing the jobs in
decreasing GPU intensity (controller.network.phases.crux_paths).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from controller.model import Cluster
from controller.network.ecmp import EcmpPath
from controller.network.jobs import NetJob, link_capacity, ring_flows
from controller.network.model import MB_PER_S_PER_GBPS, LinkId
from controller.network.phases import PhaseJob, crux, periodic_iterations
from controller.network.phases.form import Levels, PathSelection, PhaseForm, TimeShifts

# A job's rate never drops below this share of its rate alone (as jobs._FLOOR).
_FLOOR = 1e-3
_BISECTIONS = 48


@dataclass(frozen=True, slots=True)
class _Split:
    job: NetJob
    links: tuple[LinkId, ...]
    alone_gbps: float
    alone_s: float
    compute_s: float
    burst_mb: float


def _links(
    cluster: Cluster, job: NetJob, paths: Sequence[EcmpPath] | None = None
) -> tuple[LinkId, ...]:
    """Every link the job's ring crosses, once each, in ring order."""
    return tuple(dict.fromkeys(link for f in ring_flows(cluster, job, paths) for link in f.links))


def _split(cluster: Cluster, job: NetJob, iteration_s: Callable[[str, float], float]) -> _Split:
    links = _links(cluster, job)
    d = min(link_capacity(cluster, link) for link in links)
    alone = iteration_s(job.job_id, d)
    burst_mb = min(job.flow_mb, alone * MB_PER_S_PER_GBPS * d)
    compute = max(0.0, alone - burst_mb / MB_PER_S_PER_GBPS / d)
    return _Split(job, links, d, alone, compute, burst_mb)


def _groups(splits: Sequence[_Split]) -> list[list[_Split]]:
    """Jobs joined by shared links, transitively (union-find), in input order."""
    parent = list(range(len(splits)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Hashable, int] = {}
    for i, s in enumerate(splits):
        for link in s.links:
            if link in owner:
                parent[root(i)] = root(owner[link])
            else:
                owner[link] = i
    out: dict[int, list[_Split]] = {}
    for i, s in enumerate(splits):
        out.setdefault(root(i), []).append(s)
    return list(out.values())


def _equivalent_gbps(
    job_id: str, target_s: float, split: _Split, iteration_s: Callable[[str, float], float]
) -> float:
    """The rate b <= d at which the rate model's iteration takes `target_s`."""
    d = split.alone_gbps
    if target_s <= split.alone_s * (1 + 1e-9):
        return d
    lo, hi = _FLOOR * d, d
    if not math.isfinite(target_s) or iteration_s(job_id, lo) <= target_s:
        return lo
    for _ in range(_BISECTIONS):
        mid = math.sqrt(lo * hi)
        if iteration_s(job_id, mid) > target_s:
            lo = mid
        else:
            hi = mid
    return hi


def _offsets(
    group: Sequence[_Split], time_shifts: TimeShifts | None, now_s: float
) -> dict[str, float]:
    if time_shifts is not None:
        plain = [PhaseJob(s.job.job_id, s.compute_s, s.burst_mb, s.links) for s in group]
        return time_shifts(plain, {s.job.job_id: s.alone_s for s in group})
    # Uncoordinated: a job's iterations follow each other from its (re)start.
    return {s.job.job_id: (s.job.started_s - now_s) % s.alone_s for s in group}


def _intensities(cluster: Cluster, splits: Sequence[_Split]) -> list[crux.Intensity]:
    return crux.intensities(
        {s.job.job_id: s.job.gpus for s in splits},
        {s.job.job_id: s.compute_s for s in splits},
        {s.job.job_id: s.burst_mb for s in splits},
        {s.job.job_id: [link_capacity(cluster, link) for link in s.links] for s in splits},
    )


def _priorities(cluster: Cluster, group: Sequence[_Split], levels: Levels) -> dict[str, int]:
    return levels(_intensities(cluster, group))


def _routed(cluster: Cluster, splits: Sequence[_Split], select: PathSelection) -> list[_Split]:
    """The jobs on the ECMP paths `select` gives them, most intense first. Only their links
    change: a hop's lanes, whichever it takes, are its two racks' (groups'), all of
    one capacity, so the rate alone, the burst and the intensity stay as hashed."""
    order = [record.job_id for record in crux.intensity_order(_intensities(cluster, splits))]
    paths = select(
        cluster, [s.job for s in splits], order, {s.job.job_id: s.burst_mb for s in splits}
    )
    return [replace(s, links=_links(cluster, s.job, paths[s.job.job_id])) for s in splits]


def phase_job_rates(
    form: PhaseForm,
    cluster: Cluster,
    jobs: Sequence[NetJob],
    iteration_s: Callable[[str, float], float],
    now_s: float,
) -> dict[str, float]:
    """Equivalent inter-node Gbit/s per job under the phase model (module docstring).

    `iteration_s(job_id, gbps)` is the job's seconds per iteration at that rate (the
    simulator's rate model); `now_s` places each job's phase where the form has no
    `time_shifts`."""
    splits = [_split(cluster, job, iteration_s) for job in jobs]
    if form.paths is not None and cluster.has_lanes:
        splits = _routed(cluster, splits, form.paths)
    out: dict[str, float] = {}
    capacities: dict[Hashable, float] = {
        link: link_capacity(cluster, link) for s in splits for link in s.links
    }
    for group in _groups(splits):
        if len(group) == 1:
            out[group[0].job.job_id] = group[0].alone_gbps
            continue
        offsets = _offsets(group, form.time_shifts, now_s)
        levels = _priorities(cluster, group, form.levels) if form.levels is not None else {}
        phase_jobs = [
            PhaseJob(
                s.job.job_id,
                s.compute_s,
                s.burst_mb,
                s.links,
                offset_s=offsets[s.job.job_id],
                priority=levels.get(s.job.job_id, 0),
                floor_gbps=form.floor_share * s.alone_gbps,
            )
            for s in group
        ]
        times = periodic_iterations(phase_jobs, capacities, form.sharing)
        for s in group:
            jid = s.job.job_id
            out[jid] = _equivalent_gbps(jid, times[jid], s, iteration_s)
    return out
