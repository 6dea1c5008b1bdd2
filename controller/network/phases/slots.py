"""The phase networks' live form: a comm slot per job (cassini), a priority level (crux).

The operator (`PhasePublisher`, operators/network/phases.py) calls `live_phases`
each round with the network's phase form (controller.network.phases.form, from the
network registry) and the running multi-node jobs, as its network allocator sees
them (`NetJob`s and the rate model's iteration time), and publishes the answer on
the jobs' pods: a slot as `gpuflow.dev/comm-period-s` and `comm-offset-s`, which
gpuflow.train.commslot holds each all-reduce to, and a level as
`gpuflow.dev/net-priority`, which the node agent turns into an HTB class priority
(operators/agent/bandwidth.py). The jobs' split into compute and burst, their
grouping by shared links and their levels are those of the replay
(controller.network.phases.jobs), so that live and replay decide alike.

Comm slots (`LiveForm.SLOTS`, cassini). A job held to a slot of period P
communicates once per P, so every job of a group of jobs joined by shared links is
given the same period: the longest iteration alone in the group, or, if longer, the
sum of the bursts (at each job's rate alone) that cross the group's busiest link,
plus SLOT_HEADROOM. On that common circle each job's iteration is its burst and a
compute phase padded to P, and the form's `time_shifts` (cassini's: the affinity
graph's traversal) rotates the circles so that the turns overlap least, where a
job's turn is its burst stretched by the slack of its busiest link (the turns of the
jobs on that link fill the cycle: two equal jobs are half a period apart); the slot
opens where the job's turn begins. Offsets are on the wall clock, counted from the
Unix epoch, in [0, P). Deviation from CASSINI: the paper rounds unequal iteration
times to a common multiple and lets each job iterate at its own pace; a job held to
a slot iterates at the group's period, so a shorter job waits for its turn (the
price of a shift that cannot drift).

Priority levels (`LiveForm.LEVELS`, crux). Every job of a group gets its level from
the form's `levels` (crux's: `crux.PRIORITY_LEVELS - 1` the most GPU-intense; Crux,
Cao et al., SIGCOMM 2024, §4.2-4.3, as `phase_jobs` applies it).

A job that shares no link with another gets neither: it runs as if alone. Which
networks have a live form, and why the others (mltcp) have none, the registry says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from controller.model import Cluster
from controller.network.jobs import NetJob
from controller.network.phases import PhaseJob
from controller.network.phases.form import LiveForm, PhaseForm

# phase_jobs keeps the split, the grouping and the levels private; the live form
# must decide on exactly the same (issue 19: one meaning in replay and live).
from controller.network.phases.jobs import _groups, _priorities, _split

# Headroom of a slot's period over the group's longest iteration: a job a little
# slower than the model (jitter, a busy CPU) still makes its slot; commslot lets a
# job late by a tenth of a period go at once, so 5 % keeps such jobs well inside it.
SLOT_HEADROOM = 0.05
# Periods and offsets are published to the millisecond: finer differences between
# rounds are float noise, and a job's clock is not better than that (NTP).
SLOT_DIGITS = 3


@dataclass(frozen=True, slots=True)
class CommSlot:
    """A cycle of `period_s` on the wall clock in which the job's turn opens at
    `offset_s` (seconds since the Unix epoch, mod period_s)."""

    period_s: float
    offset_s: float


@dataclass(frozen=True, slots=True)
class LivePhase:
    """What one job is given: its rate alone (the slowest of its links: what it may
    use while the others compute), and its slot or its priority level (None when the
    network gives none, or the job shares no link)."""

    job_id: str
    alone_gbps: float
    slot: CommSlot | None = None
    priority: int | None = None


def live_phases(
    form: PhaseForm,
    cluster: Cluster,
    jobs: Sequence[NetJob],
    iteration_s: Callable[[str, float], float],
) -> dict[str, LivePhase]:
    """Each job's slot or level, as `form.live` says, by job id (module docstring).

    `iteration_s(job_id, gbps)` is the job's seconds per iteration with that
    inter-node rate (the rate model). ValueError for a form without a live form."""
    if form.live is None:
        raise ValueError("the phase form has no live form")
    splits = [_split(cluster, job, iteration_s) for job in sorted(jobs, key=lambda j: j.job_id)]
    out: dict[str, LivePhase] = {}
    for group in _groups(splits):
        if len(group) == 1:
            s = group[0]
            out[s.job.job_id] = LivePhase(s.job.job_id, s.alone_gbps)
            continue
        if form.live is LiveForm.LEVELS:
            assert form.levels is not None  # PhaseForm checks it
            levels = _priorities(cluster, group, form.levels)
            for s in group:
                jid = s.job.job_id
                out[jid] = LivePhase(jid, s.alone_gbps, priority=levels[jid])
            continue
        burst_s = {s.job.job_id: s.burst_mb / 125.0 / s.alone_gbps for s in group}
        on_link = link_burst_s([(s.links, burst_s[s.job.job_id]) for s in group])
        period = slot_period_s([s.alone_s for s in group], on_link)
        # Each job's turn: its burst stretched by its busiest link's slack, so that
        # the turns of the jobs on that link fill the cycle and a late job eats into
        # its own slack, not into the next job's turn.
        turn_s = {
            s.job.job_id: burst_s[s.job.job_id] * period / max(on_link[k] for k in s.links)
            for s in group
        }
        circle = [
            PhaseJob(s.job.job_id, period - turn_s[s.job.job_id], s.burst_mb, s.links)
            for s in group
        ]
        assert form.time_shifts is not None  # PhaseForm checks it
        shifts = form.time_shifts(circle, {j.job_id: period for j in circle})
        for s in group:
            jid = s.job.job_id
            # time_shifts places an iteration's start; the turn ends the iteration.
            opens = round((shifts[jid] - turn_s[jid]) % period, SLOT_DIGITS) % period
            out[jid] = LivePhase(jid, s.alone_gbps, slot=CommSlot(period, opens))
    return out


def link_burst_s(bursts: Sequence[tuple[Sequence[Hashable], float]]) -> dict[Hashable, float]:
    """Seconds of bursts per link, end to end, from each job's links and burst seconds."""
    on_link: dict[Hashable, float] = {}
    for links, seconds in bursts:
        for link in links:
            on_link[link] = on_link.get(link, 0.0) + seconds
    return on_link


def slot_period_s(alone_s: Sequence[float], on_link: Mapping[Hashable, float]) -> float:
    """A group's common period: the longest iteration alone or the busiest link's
    bursts end to end, whichever is longer, plus SLOT_HEADROOM, rounded up to the
    millisecond."""
    busiest = max(on_link.values(), default=0.0)
    need = (1.0 + SLOT_HEADROOM) * max(max(alone_s, default=0.0), busiest)
    scale = float(10**SLOT_DIGITS)
    return max(1, math.ceil(need * scale - 1e-6)) / scale
