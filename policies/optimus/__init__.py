"""Optimus: remaining-time-driven elastic allocation by marginal gain.

Peng, Bao, Chen, Wu and Guo, "Optimus: An Efficient Dynamic Resource Scheduler for Deep
Learning Clusters", EuroSys 2018. Made by the registry (`"optimus": Optimus`); the
simulator (or another backend) calls `schedule` once a round. The fitting lives in
`policies.optimus.fit`, profiling and placement in `policies.optimus.cluster`.

Each round, for every active job:

- §3.1 Convergence: the losses the job reported so far (`loss_source`, one per round
  while it runs, once its iterations done have grown by `sample_growth`) are fitted to
  Eq. (1) l(e) = 1/(β0·e + β1) + β2 by non-negative least squares; the job converges at
  the epoch e* where the fitted loss falls by less than `convergence_threshold` an
  epoch, and its remaining iterations are Q = e*·iters_per_epoch - done (at least
  2 % of done). Before `min_loss_samples` losses, Q = the iterations it would do in
  `prior_remaining_s` at its requested size, or its iterations done if more (it is
  assumed at most half way).
- §3.2 Speed: f(w) = (θ0·M/w + θ1 + θ2·2(w-1)/w + θ3·2(n-1)/n)^-1, Eq. (3) adapted to
  all-reduce without parameter servers (see `optimus_fit`), fitted by NNLS to the
  speeds seen. Optimus runs each new job briefly at several sizes before scheduling
  it (§3.2); in replay that profiling is the performance model's speed
  (`controller.model.perf.throughput_ips`) at min, max, the requested size, powers of
  two and one whole server, each placed on the fewest servers of the empty cluster. The
  speed measured while the job runs (`JobView.rate_ips`) replaces the profiled one at
  its size. As the authors' estimator does, f at a size seen is the speed seen there,
  and the fitted function elsewhere.
- Remaining time T(w) = Q / f(w) (§4.1), plus a switching cost: a running job that
  changes size pays its model's restart time x (1 + `resize_hysteresis`), a preempted
  job restarting pays the restart time, a first start nothing. Speeds are the job's own
  steps per second at its fixed batch; where its work is counted at another batch (an
  AdaptDL workload's jobs count it at the application's smallest batch, as the Pollux
  artifact does), they are scaled by what one step is worth now
  (`controller.model.perf.work.work_per_step`), so Q and f are in the same units.

§4.1 Allocation, greedy by marginal gain: jobs get their minimum (`spec.min_gpus`; a
non-elastic job has min = max = its gang) while GPUs last, the others wait; in order
of submission (`admission="arrival"`, the default), or of T at the minimum size
(`admission="remaining"`), then submit time, then id. Then, repeatedly, the job whose
remaining time drops most per GPU added, (T(w) - T(w')) / (w' - w), grows to w', until
the GPUs run out or no job gains. A step may add several GPUs at once (any w' up to
its max and the GPUs left), since f is not concave where a job crosses a server, and a
running job's own size (free of the switching cost) is always among the candidates.

§4.2 Placement on the fewest servers: a job that keeps its size keeps its GPUs; the
others are placed, largest first, on the one server that fits best, or else the
emptiest servers first (the fewest servers that hold the gang). An elastic job that
does not place shrinks until it does; one that cannot place its minimum waits. The
servers searched are those the GPU-choice filter leaves each job
(controller.model.gpu_choice.candidates: no cordoned server, GPU models it accepts, CPU and
memory for its pods), and sizes are chosen from the GPUs a plan may give out
(`Snapshot.usable_gpus`).

Heterogeneous clusters (gpuflow's, issue 31 item 3; the paper's cluster has one GPU
type): a new job is profiled at each size on its fastest GPU type that has that many
GPUs (`controller.model.gpu_choice.gpu_type`: the backend's speeds per type, the throughput
matrix's in a replay given `--throughputs`, else the performance model's), so that its
remaining-time estimate T(w) and the marginal gains of §4.1 use the rate on that type;
§4.2's placement puts it on the fewest servers of its fastest type with room at the
size it gets, at each size before shrinking, and across types only where no type has
room (the job then runs at its slowest GPU's speed). The speed a running job shows
replaces the profiled one at its size, on whichever type it holds: f is then a mix of
types where the job did not get its fastest one. The GPU budget of §4.1 counts GPUs of
every type alike. On a cluster of one type none of this applies, nor with
`aware=False` (blind to types: profiled and packed as on one type).

Cross-round memory is the frozen `OptimusState` in `Plan.state`: per job the losses
seen, its epoch length, the fitted curve, the speed samples and the fitted θ.

Deviations:
- No parameter servers: the speed function is the all-reduce form above, and the
  allocation unit is one GPU rather than one worker or PS with its dominant share.
- Loss samples are, live, the job's reports (every loss its gpuflow.train reports
  carry since the last round, with its epoch length, as `JobView.measured` gives
  them); in replay, or for a job that reports none (`optimus_fit.reported_loss` falls
  back), `optimus_fit.synthetic_loss`, a seeded curve per job whose convergence point
  is its true total iterations. The paper also normalises losses and drops outliers
  before fitting; the fit here takes the samples as they come.
- Remaining time adds a switching (restart) cost with hysteresis, which the paper does
  not model: its resizes are checkpoint-restarts too (§5), but its allocation ignores
  their cost. Without it, small gains would restart jobs every round.
- The paper starts every job with one worker and one PS, assuming they fit; when they
  do not, jobs get their minimum in submission order, as the Pollux artifact's
  Optimus+Oracle (the baseline of the Pollux paper) does. `admission="remaining"`
  (least estimated remaining time first) is gpuflow's extension.
- Profiling costs nothing in replay (the paper runs each job for a few minutes first).
- Rounds: in replay, at arrivals and completions (the simulator's); live, the operator
  asks the policy at the same moments (controller.pace), and while a running job
  reports losses the plan asks to be woken `refit_s` (5 s) later, so that the fit
  follows the reports, as the paper's estimator refits as samples arrive; the
  switching cost above keeps such rounds from resizing jobs for small gains.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.model import (
    Cluster,
    JobStatus,
    JobView,
    Plan,
    Reason,
    Snapshot,
)
from controller.model.catalog import resolve
from controller.model.gpu_choice.gpu_type import rates_to_choose
from controller.model.job import does_not_fit
from controller.model.perf.work import work_per_step
from policies.optimus.cluster import (
    Profiler,
    Speeds,
    job_sizes,
    place,
    speed_model,
)
from policies.optimus.fit import (
    CONVERGENCE_THRESHOLD,
    LossCurve,
    LossSource,
    fit_loss_curve,
    reported_loss,
)

# A fitted remaining work below this fraction of the work done is raised to it: the job
# still runs, so the fit has called convergence early.
_MIN_REMAINING_FRACTION = 0.02
# Who gets a minimum allocation when not every job fits: in order of submission (the
# paper starts every job as it arrives; the Pollux artifact's Optimus+Oracle admits
# in submission order) or least estimated remaining time first (gpuflow's extension).
ADMISSION = ("arrival", "remaining")
# How soon a live round that saw jobs reporting losses asks for the next one: the
# API's default summary interval (api/settings.py: a job's reports reach its DLJob at
# most that often), so that each fit has new losses to take in; gpuflow's choice (the
# paper refits as samples arrive and gives no period).
REFIT_S = 5.0
# A gain per GPU must beat this fraction of the job's remaining time to count as one
# (float noise, not a policy knob).
_GAIN_EPS = 1e-9


@dataclass(frozen=True)
class JobMemory:
    """What Optimus has learnt of one job (all it keeps between rounds)."""

    losses: tuple[tuple[float, float], ...] = ()  # (iteration, loss) as reported
    iters_per_epoch: float = 0.0
    curve: LossCurve | None = None  # fitted in epochs
    speeds: tuple[tuple[int, float], ...] = ()  # (GPUs, iterations/s), by GPUs
    theta: tuple[float, ...] | None = None
    speed_table: tuple[float, ...] = ()  # f(w) for w = min_gpus .. its largest size


@dataclass(frozen=True)
class OptimusState:
    jobs: Mapping[str, JobMemory] = field(default_factory=dict)


@dataclass(frozen=True)
class _Estimate:
    job: JobView
    sizes: np.ndarray  # candidate GPU counts, min .. max that fits the cluster
    time_s: np.ndarray  # estimated remaining time at each size, switching included
    current: int  # GPUs held now (0 when waiting)


@dataclass(frozen=True)
class Optimus:
    """Options: the convergence threshold δ (loss per epoch), how many losses before
    the fit is trusted, how much a job's iterations must grow between two recorded
    losses, how many are kept, the prior remaining time of a job without a fit, the
    resize hysteresis (restart cost multiplier - 1), and where losses come from."""

    convergence_threshold: float = CONVERGENCE_THRESHOLD
    min_loss_samples: int = 5
    sample_growth: float = 0.25
    max_loss_samples: int = 40
    prior_remaining_s: float = 3600.0
    resize_hysteresis: float = 1.0
    admission: str = "arrival"  # or "remaining": who gets a minimum when not all fit
    loss_source: LossSource = reported_loss
    # While a running job reports its own losses (live), decide again this often so
    # that the fit takes them in; gpuflow's choice (see the deviations).
    refit_s: float = REFIT_S
    # Place each job on its fastest GPU type with room (controller.model.gpu_choice.gpu_type);
    # False: blind to types, the backend's placer as it is (the comparison of Gavel §7).
    aware: bool = True
    name: str = "optimus"

    def __post_init__(self) -> None:
        if self.admission not in ADMISSION:
            raise ValueError(
                f"admission must be one of {', '.join(ADMISSION)}, not {self.admission!r}"
            )

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        now = snapshot.now_s
        known = state.jobs if isinstance(state, OptimusState) else {}
        cluster = snapshot.cluster
        budget = sum(snapshot.usable_gpus())  # none new on a down or cordoned node
        # None on a cluster of one GPU type, or blind to types.
        rates = rates_to_choose(snapshot) if self.aware else None
        profiler = Profiler(cluster, rates)
        memory: dict[str, JobMemory] = {}
        estimates: list[_Estimate] = []
        for job in snapshot.jobs:
            mem = known.get(job.job_id)
            if mem is None:
                mem = _memory(job, profiler.profile(job), cluster)
            gain = _work_per_step(job, now)
            mem = self._observe(job, mem, now, cluster, gain)
            memory[job.job_id] = mem
            estimates.append(self._estimate(job, mem, now, cluster, gain))
        sizes, reasons = self._allocate(estimates, budget)
        least = [(e.job, int(e.sizes[0])) for e in estimates]
        run, placed_reasons = place(snapshot, sizes, least, rates)
        reasons.update(placed_reasons)
        reporting = any(j.running and j.measured and j.measured.losses for j in snapshot.jobs)
        wake = now + self.refit_s if reporting and self.refit_s > 0 else None
        return Plan(run=run, reasons=reasons, state=OptimusState(memory), wake_s=wake)

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Who gets a minimum first (§4.1 admission): submission order, or with
        `admission="remaining"` least estimated remaining time at the minimum size."""
        if self.admission == "arrival":
            jobs = sorted(snapshot.jobs, key=lambda j: (j.spec.submit_s, j.job_id))
            return [j.job_id for j in jobs]
        now, cluster = snapshot.now_s, snapshot.cluster
        known = state.jobs if isinstance(state, OptimusState) else {}
        profiler = Profiler(cluster, rates_to_choose(snapshot) if self.aware else None)
        keyed = []
        for job in snapshot.jobs:
            mem = known.get(job.job_id) or _memory(job, profiler.profile(job), cluster)
            est = self._estimate(job, mem, now, cluster, _work_per_step(job, now))
            keyed.append((float(est.time_s[0]), job.spec.submit_s, job.job_id))
        return [job_id for _, _, job_id in sorted(keyed)]

    # -- models ---------------------------------------------------------------------

    def _observe(
        self, job: JobView, mem: JobMemory, now: float, cluster: Cluster, gain: float
    ) -> JobMemory:
        """Add what a running job shows now: its speed at its size, maybe a loss.
        `gain`: work per step of the job now (`_work_per_step`)."""
        if not job.running or job.allocation is None:
            return mem
        speeds, theta, table = mem.speeds, mem.theta, mem.speed_table
        gpus = job.allocation.num_gpus
        seen = job.rate_ips / gain  # the job's own steps per second
        if seen > 0 and dict(speeds).get(gpus) != seen:
            speeds = tuple(sorted({**dict(speeds), gpus: seen}.items()))
            theta, table = speed_model(job, speeds, cluster)
        losses, per_epoch, curve = mem.losses, mem.iters_per_epoch, mem.curve
        done = job.done_iters_at(now)
        last = losses[-1][0] if losses else -1.0
        reported = job.measured
        if reported is not None and reported.losses and reported.epoch_steps:
            # A live job's own reports: every loss it reported since the last round.
            new = tuple((float(k), v) for k, v in reported.losses if last < k <= done)
            if new:
                losses = _thin((*losses, *new), self.max_loss_samples)
                per_epoch = float(reported.epoch_steps)
                if len(losses) >= self.min_loss_samples:
                    curve = fit_loss_curve(
                        [k / per_epoch for k, _ in losses], [v for _, v in losses]
                    )
        elif done > last and done >= last * (1.0 + self.sample_growth):
            report = self.loss_source(job, now)
            if report is not None and report.iteration <= done:
                losses = _thin((*losses, (report.iteration, report.loss)), self.max_loss_samples)
                per_epoch = report.iters_per_epoch
                if len(losses) >= self.min_loss_samples:
                    curve = fit_loss_curve(
                        [k / per_epoch for k, _ in losses], [v for _, v in losses]
                    )
        return JobMemory(losses, per_epoch, curve, speeds, theta, table)

    def _estimate(
        self, job: JobView, mem: JobMemory, now: float, cluster: Cluster, gain: float
    ) -> _Estimate:
        spec = job.spec
        sizes = job_sizes(job, cluster)
        speed = np.array(mem.speed_table) * gain  # work per second
        done = job.done_iters_at(now)
        if mem.curve is not None and mem.iters_per_epoch > 0:
            converged = mem.curve.converged_epoch(self.convergence_threshold)
            remaining = converged * mem.iters_per_epoch - done
            remaining = max(remaining, _MIN_REMAINING_FRACTION * done, 1.0)
        else:
            asked = float(speed[min(spec.num_gpus, int(sizes[-1])) - spec.min_gpus])
            remaining = max(self.prior_remaining_s * asked, done, 1.0)
        time_s = remaining / speed  # speeds seen or fitted are > 0
        current = job.allocation.num_gpus if job.running and job.allocation else 0
        restart = resolve(spec.model).restart_s
        if job.running:
            time_s = time_s + np.where(
                sizes == current, 0.0, restart * (1 + self.resize_hysteresis)
            )
        elif job.status is not JobStatus.QUEUED:
            time_s = time_s + restart
        return _Estimate(job, sizes, time_s, current)

    # -- §4.1 allocation --------------------------------------------------------------

    def _allocate(
        self, estimates: list[_Estimate], budget: int
    ) -> tuple[dict[str, tuple[int, int]], dict[str, Reason]]:
        """GPUs per job (job id -> (GPUs, index in the order)) and reasons for the rest."""
        by_remaining = self.admission == "remaining"
        order = sorted(
            range(len(estimates)),
            key=lambda i: (
                float(estimates[i].time_s[0]) if by_remaining else 0.0,
                estimates[i].job.spec.submit_s,
                estimates[i].job.job_id,
            ),
        )
        holders = "jobs with less estimated remaining time" if by_remaining else "earlier jobs"
        index: dict[str, int] = {}  # job id -> index into its sizes
        reasons: dict[str, Reason] = {}
        for i in order:
            est = estimates[i]
            need = int(est.sizes[0])
            if need <= budget:
                index[est.job.job_id] = 0
                budget -= need
            else:
                others = budget if budget > 0 else "no"
                reasons[est.job.job_id] = does_not_fit(need, f"{holders} hold the {others} others")
        by_id = {e.job.job_id: (rank, e) for rank, e in enumerate(estimates)}
        heap: list[tuple[float, int, str, int]] = []
        for job_id in index:
            rank, est = by_id[job_id]
            self._push(heap, est, rank, 0, budget)
        while heap and budget > 0:
            _, rank, job_id, target = heapq.heappop(heap)
            est = estimates[rank]
            at = index[job_id]
            step = int(est.sizes[target] - est.sizes[at])
            if step > budget:
                self._push(heap, est, rank, at, budget)
                continue
            index[job_id] = target
            budget -= step
            self._push(heap, est, rank, target, budget)
        position = {estimates[i].job.job_id: p for p, i in enumerate(order)}
        sizes = {j: (int(by_id[j][1].sizes[k]), position[j]) for j, k in index.items()}
        return sizes, reasons

    @staticmethod
    def _push(
        heap: list[tuple[float, int, str, int]], est: _Estimate, rank: int, at: int, budget: int
    ) -> None:
        """Queue a job's best next step from size index `at` within `budget` GPUs."""
        sizes, time_s = est.sizes, est.time_s
        last = int(np.searchsorted(sizes, sizes[at] + budget, side="right"))
        if last <= at + 1:
            return
        gains = (time_s[at] - time_s[at + 1 : last]) / (sizes[at + 1 : last] - sizes[at])
        best = int(np.argmax(gains))
        gain = float(gains[best])
        scale = float(time_s[at]) if math.isfinite(time_s[at]) else 1.0
        if gain > _GAIN_EPS * scale:
            heapq.heappush(heap, (-gain, rank, est.job.job_id, at + 1 + best))


# -- helpers ------------------------------------------------------------------------


def _work_per_step(job: JobView, now: float) -> float:
    """Work iterations one of the job's own steps is worth now: Optimus profiles and
    fits speeds in the job's own steps at its fixed batch, while its remaining work is
    counted at the work batch (`controller.model.perf.work`); 1 when the two are the same."""
    return work_per_step(job.spec, job.batch_size or job.spec.batch_size, job.progress_at(now))


def _memory(job: JobView, speeds: Speeds, cluster: Cluster) -> JobMemory:
    """A new job's memory: its profiled speeds and the model fitted to them."""
    theta, table = speed_model(job, speeds, cluster)
    return JobMemory(speeds=speeds, theta=theta, speed_table=table)


def _thin(samples: tuple[tuple[float, float], ...], cap: int) -> tuple[tuple[float, float], ...]:
    """At most `cap` samples: every other one dropped (as often as needed), the newest
    kept."""
    while len(samples) > cap:
        samples = (*samples[:-1:2], samples[-1])
    return samples
