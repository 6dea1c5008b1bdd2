"""The phase-level network model: compute phases and all-reduce bursts, event by event.

A data-parallel job repeats one iteration: a compute phase (the part of forward and
backward that its all-reduce does not hide), then a communication burst that moves
the job's bytes over every link its placement crosses. Jobs that share a link
contend only while their bursts overlap (CASSINI, Rajasekaran et al., NSDI 2024,
§2; Crux, Cao et al., SIGCOMM 2024, §2.2); a steady rate per job, as
`controller.network.jobs` gives, cannot tell two jobs that collide on every burst
from two that take turns.

`periodic_iterations` runs jobs over shared links at burst granularity: between
events the rates are constant, so progress is advanced analytically; an event is a
burst starting or ending (and, for `mltcp`, a job crossing a tenth of its burst, since
its weight moves with the bytes sent). It runs until every job has finished enough
iterations for the schedule to repeat and returns each job's mean iteration time over
the iterations after the warm-up. Callers: `controller.network.phase_rates` (the
simulator's `--network-model phases`), the policies' scoring (`cassini`), bench/, and
the real-traffic check of the model (H4's namespace test) through
`shared_link_iteration_s`, the one-link form.

Sharing rules, applied at each event to the jobs in burst (each job is one flow over
the union of its links: a ring sends exactly one flow of the job over each link):

- `fair`: per-job max-min fairness over the links (progressive filling).
- `priority`: strict priority by `PhaseJob.priority` (higher first), max-min within
  a level, lower levels fill what is left (Crux §4.3, hardware priority queues);
  before any level, every sender is guaranteed its `floor_gbps` (max-min up to it),
  as the live enforcement does (an HTB class's rate under its priority, see
  operators/network/phases.py): a job below levels whose bursts, together, never
  leave its link idle still progresses instead of starving.
- `mltcp`: weighted max-min, weight 1 + MLTCP_SLOPE x (fraction of the burst already
  sent): MLTCP (Rajasekaran et al., HotNets 2024, §3) scales a flow's congestion-window
  increase by a linear function of the bytes sent in its current iteration, so the
  job further ahead finishes first and jobs slide into interleaving. Deviation: the
  window dynamics are replaced by the fluid rates they converge to, and the weight
  is updated at tenths of a burst instead of per ACK.

Units: time in s, sizes in MB (10^6 bytes), rates in Gbit/s (1 Gbit/s = 125 MB/s).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from controller.network.model import MB_PER_S_PER_GBPS

SHARING_RULES = ("fair", "priority", "mltcp")
# MLTCP's linear weight F(r) = 1 + slope * r (HotNets 2024 §3 uses a linear
# function of the bytes ratio; 1 and 1 + 1 at the ends are our choice of intercept
# and slope: the job that has sent all but nothing is twice as aggressive).
MLTCP_SLOPE = 1.0
# Weight updates per burst under mltcp.
MLTCP_STEPS = 10
# Iterations of the slowest job simulated before and while measuring. Jobs whose
# periods are commensurate settle within a few periods; others never repeat exactly
# and their mean converges as 1/iterations: on 60 random instances of 2-4 jobs,
# 8 + 16 stays within 2.2 % of 100 + 200 (4 + 12: 3.8 %; test_phases.py checks 3 %).
WARMUP_ITERATIONS = 8
MEASURED_ITERATIONS = 16
# Events after which a run stops early (a fast job beside a very slow one); each
# job's mean is then over what it did.
_MAX_EVENTS = 200_000
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class PhaseJob:
    """One job's iteration: `compute_s` of exposed compute, then a burst of `comm_mb`
    over each of `links`, at most `max_gbps` (its rate alone; inf: the links decide).

    The job starts its first compute phase at `offset_s` (its time shift) and idles
    before it. `priority` is used by the `priority` rule (higher goes first), and so
    is `floor_gbps`, the rate it is guaranteed whatever the higher levels send.
    """

    job_id: str
    compute_s: float
    comm_mb: float
    links: tuple[Hashable, ...]
    offset_s: float = 0.0
    priority: int = 0
    max_gbps: float = math.inf
    floor_gbps: float = 0.0

    def __post_init__(self) -> None:
        if self.compute_s < 0 or not math.isfinite(self.compute_s):
            raise ValueError(f"job {self.job_id}: compute_s must be >= 0, got {self.compute_s}")
        if self.comm_mb < 0 or not math.isfinite(self.comm_mb):
            raise ValueError(f"job {self.job_id}: comm_mb must be >= 0, got {self.comm_mb}")
        if self.offset_s < 0 or not math.isfinite(self.offset_s):
            raise ValueError(f"job {self.job_id}: offset_s must be >= 0, got {self.offset_s}")
        if not 0 <= self.floor_gbps <= self.max_gbps:
            raise ValueError(f"job {self.job_id}: floor_gbps must be in [0, max_gbps]")
        if self.compute_s == 0 and self.comm_mb == 0:
            raise ValueError(f"job {self.job_id}: an iteration needs compute_s or comm_mb > 0")


def shared_link_iteration_s(
    compute_s: Sequence[float],
    comm_mb: Sequence[float],
    offset_s: Sequence[float],
    capacity_gbps: float,
    sharing: str = "fair",
    priority: Sequence[int] | None = None,
) -> tuple[float, ...]:
    """Mean steady-state iteration time (s) of jobs that share one link.

    Job i repeats: `compute_s[i]` seconds of compute (nothing on the link), then it
    sends `comm_mb[i]` MB (10^6 bytes) over the link, sharing the link's
    `capacity_gbps` (Gbit/s, one direction) with the other jobs sending at the same
    time by `sharing` (`fair`: equal shares of the capacity, any share a job cannot
    use going to the others; `priority`: `priority[i]`, higher first; `mltcp`:
    shares weighted by the bytes already sent in the current iteration). Job i's
    first compute phase starts at `offset_s[i]` (seconds, its shift within the
    period). Enough periods are simulated for the pattern to repeat; the result is
    each job's mean seconds per iteration after that, in input order.

    Alone, a job's iteration time is compute_s + comm_mb / (125 x capacity_gbps).
    """
    n = len(compute_s)
    if len(comm_mb) != n or len(offset_s) != n:
        raise ValueError("compute_s, comm_mb and offset_s must have one entry per job")
    if priority is not None and len(priority) != n:
        raise ValueError("priority must have one entry per job")
    if not capacity_gbps > 0 or not math.isfinite(capacity_gbps):
        raise ValueError(f"capacity_gbps must be > 0, got {capacity_gbps}")
    link = ("link", 0)
    jobs = [
        PhaseJob(
            f"job{i}",
            float(compute_s[i]),
            float(comm_mb[i]),
            (link,),
            offset_s=float(offset_s[i]),
            priority=0 if priority is None else int(priority[i]),
        )
        for i in range(n)
    ]
    times = periodic_iterations(jobs, {link: capacity_gbps}, sharing)
    return tuple(times[job.job_id] for job in jobs)


def periodic_iterations(
    jobs: Sequence[PhaseJob],
    capacities: Mapping[Hashable, float],
    sharing: str = "fair",
    *,
    warmup: int = WARMUP_ITERATIONS,
    measured: int = MEASURED_ITERATIONS,
) -> dict[str, float]:
    """Each job's mean seconds per iteration in the periodic regime (module docstring).

    Every link of every job needs a capacity in `capacities` (Gbit/s). Jobs with no
    bytes (or no links) never contend: their iteration is their compute phase.
    """
    if sharing not in SHARING_RULES:
        raise ValueError(f"unknown sharing rule {sharing!r} (known: {', '.join(SHARING_RULES)})")
    ids = [job.job_id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique")
    for job in jobs:
        for link in job.links:
            if link not in capacities:
                raise ValueError(f"job {job.job_id}: link {link!r} has no capacity")
            if not capacities[link] > 0:
                raise ValueError(f"link {link!r}: capacity must be > 0")
    return _Run(jobs, capacities, sharing).iterate(warmup, measured)


class _Run:
    """The event loop of one `periodic_iterations` call."""

    def __init__(
        self, jobs: Sequence[PhaseJob], capacities: Mapping[Hashable, float], sharing: str
    ) -> None:
        self.jobs = list(jobs)
        self.capacities = capacities
        self.sharing = sharing
        n = len(self.jobs)
        # Per job: in burst or not, when its compute ends, MB left in its burst.
        self.sending = [False] * n
        self.compute_end = [job.offset_s + job.compute_s for job in self.jobs]
        self.left_mb = [0.0] * n
        self.finishes: list[list[float]] = [[] for _ in range(n)]
        # Rates depend only on who is sending (and, for mltcp, how far each is): in
        # the periodic regime the same few sets recur, so each is filled once.
        self.memo: dict[tuple[tuple[int, int], ...], dict[int, float]] = {}
        self.contended_memo: dict[tuple[int, ...], set[int]] = {}
        # A link only one job crosses is just a cap on that job's rate: filling runs
        # over the shared links (a ring crossing 8 ToRs has ~40 links, its NICs
        # private), each job capped by its private links and `max_gbps`.
        uses = Counter(link for job in self.jobs for link in set(job.links))
        self.shared = [
            tuple(x for x in dict.fromkeys(job.links) if uses[x] > 1) for job in self.jobs
        ]
        self.solo_gbps = [
            min([job.max_gbps, *(capacities[x] for x in job.links if uses[x] == 1)])
            for job in self.jobs
        ]

    def iterate(self, warmup: int, measured: int) -> dict[str, float]:
        out: dict[str, float] = {}
        active = []
        for i, job in enumerate(self.jobs):
            if job.comm_mb == 0 or not job.links:
                out[job.job_id] = job.compute_s
            else:
                active.append(i)
        if not active:
            return out
        wanted = warmup + measured + 1
        now = 0.0
        events = 0
        while min(len(self.finishes[i]) for i in active) < wanted and events < _MAX_EVENTS:
            events += 1
            senders = [i for i in active if self.sending[i]]
            contended = self._contended(senders) if self.sharing == "mltcp" else set()
            rates = self._rates(senders, contended)
            step = math.inf
            for i in active:
                if not self.sending[i]:
                    step = min(step, self.compute_end[i] - now)
            for i in senders:
                r = rates[i] * MB_PER_S_PER_GBPS
                if r > 0:
                    target = self.left_mb[i]
                    if i in contended:  # its weight moves its rate: stop at the next tenth
                        target = self._to_next_weight_step(i)
                    step = min(step, target / r)
            step = max(step, 0.0)
            now += step
            for i in senders:
                self.left_mb[i] -= rates[i] * MB_PER_S_PER_GBPS * step
                if self.left_mb[i] <= _EPS * self.jobs[i].comm_mb:
                    self.sending[i] = False
                    self.finishes[i].append(now)
                    self.compute_end[i] = now + self.jobs[i].compute_s
            # Bursts start when compute ends (at once for a job without compute).
            for i in active:
                if not self.sending[i] and self.compute_end[i] <= now + _EPS:
                    self.sending[i] = True
                    self.left_mb[i] = self.jobs[i].comm_mb
        return out | self._means(active, warmup)

    def _means(self, active: list[int], warmup: int) -> dict[str, float]:
        """Mean iteration time over the finishes after every job's warm-up."""
        warm = [
            self.finishes[i][min(warmup, len(self.finishes[i]) - 1)]
            for i in active
            if self.finishes[i]
        ]
        since = max(warm, default=0.0)
        out = {}
        for i in active:
            if not self.finishes[i]:  # starved (strict priority behind a saturating job)
                out[self.jobs[i].job_id] = math.inf
                continue
            done = [t for t in self.finishes[i] if t >= since - _EPS]
            if len(done) >= 2:
                out[self.jobs[i].job_id] = (done[-1] - done[0]) / (len(done) - 1)
            else:
                # Too slow for the window (the event cap): its mean since its start.
                finished = self.finishes[i]
                out[self.jobs[i].job_id] = (finished[-1] - self.jobs[i].offset_s) / len(finished)
        return out

    def _contended(self, senders: list[int]) -> set[int]:
        """Senders that share a link with another sender (their weights matter)."""
        if len(senders) < 2:
            return set()
        key = tuple(senders)
        cached = self.contended_memo.get(key)
        if cached is None:
            cached = self.contended_memo[key] = self._find_contended(senders)
        return cached

    def _find_contended(self, senders: list[int]) -> set[int]:
        seen: dict[Hashable, int] = {}
        out: set[int] = set()
        for i in senders:
            for link in self.jobs[i].links:
                other = seen.setdefault(link, i)
                if other != i:
                    out.update((i, other))
        return out

    def _to_next_weight_step(self, i: int) -> float:
        """MB until job i's burst crosses its next tenth (its mltcp weight changes)."""
        total = self.jobs[i].comm_mb
        sent = total - self.left_mb[i]
        step_mb = total / MLTCP_STEPS
        nxt = (math.floor(sent / step_mb + 1e-9) + 1) * step_mb
        return max(min(nxt, total) - sent, _EPS * total)

    def _weight_step(self, i: int) -> int:
        """Tenths of its burst job i has sent (0 unless mltcp)."""
        if self.sharing != "mltcp":
            return 0
        total = self.jobs[i].comm_mb
        return math.floor((total - self.left_mb[i]) / total * MLTCP_STEPS + 1e-9)

    def _weight(self, i: int) -> float:
        return 1.0 + MLTCP_SLOPE * self._weight_step(i) / MLTCP_STEPS

    def _rates(self, senders: list[int], contended: set[int]) -> dict[int, float]:
        """Rates of `senders`; only the `contended` ones' weights can move them (a
        sender alone on its links gets its links whatever its weight), so the others
        are keyed, and filled, at weight 1: fewer distinct sets under mltcp."""
        if not senders:
            return {}
        key = tuple((i, self._weight_step(i) if i in contended else 0) for i in senders)
        cached = self.memo.get(key)
        if cached is None:
            cached = self.memo[key] = self._fill_rules(senders, contended)
        return cached

    def _fill_rules(self, senders: list[int], contended: set[int]) -> dict[int, float]:
        residual = {link: self.capacities[link] for i in senders for link in self.shared[i]}
        rates: dict[int, float] = {}
        if self.sharing == "priority":
            floors = {i: min(self.jobs[i].floor_gbps, self.solo_gbps[i]) for i in senders}
            if any(floors.values()):
                rates = self._fill(senders, residual, contended, floors)
            levels = sorted({self.jobs[i].priority for i in senders}, reverse=True)
            for level in levels:
                group = [i for i in senders if self.jobs[i].priority == level]
                room = {i: self.solo_gbps[i] - rates.get(i, 0.0) for i in group}
                for i, more in self._fill(group, residual, contended, room).items():
                    rates[i] = rates.get(i, 0.0) + more
        else:
            rates = self._fill(senders, residual, contended)
        return rates

    def _fill(
        self,
        group: list[int],
        residual: dict[Hashable, float],
        contended: set[int],
        caps: Mapping[int, float] | None = None,
    ) -> dict[int, float]:
        """Weighted max-min on `residual` (the shared links) by progressive filling,
        each job up to its cap (`caps`, else its private links' and `max_gbps`);
        `residual` is used up."""
        cap = caps if caps is not None else {i: self.solo_gbps[i] for i in group}
        rates = dict.fromkeys(group, 0.0)
        weight = {i: self._weight(i) if i in contended else 1.0 for i in group}
        open_ = set(group)
        while open_:
            demand: dict[Hashable, float] = {}
            for i in open_:
                for link in self.shared[i]:
                    demand[link] = demand.get(link, 0.0) + weight[i]
            level = min((residual[link] / w for link, w in demand.items()), default=math.inf)
            # A job's own cap (private links, its rate alone) can stop it first.
            for i in open_:
                room = (cap[i] - rates[i]) / weight[i]
                level = min(level, room)
            level = max(level, 0.0)
            for i in open_:
                rates[i] += level * weight[i]
            for link, w in demand.items():
                residual[link] -= level * w
            frozen = {
                i
                for i in open_
                if rates[i] >= cap[i] * (1 - 1e-12)
                or any(residual[link] <= 1e-9 * self.capacities[link] for link in self.shared[i])
            }
            if not frozen:
                break
            open_ -= frozen
        return rates
