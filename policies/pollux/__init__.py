"""Pollux: co-adaptive, goodput-optimising scheduling of elastic training jobs.

Qiao, Choe, Subramanya, Neiswanger, Ho, Zhang, Ganger, Xing, "Pollux: Co-adaptive
Cluster Scheduling for Goodput-Optimized Deep Learning", OSDI 2021; the reference code
is petuum/adaptdl (`adaptdl/adaptdl/goodput.py`, `sched/adaptdl_sched/policy/pollux.py`)
and its `osdi21-artifact` branch (`simulator/pollux.py`, `simulator/speedup.py`,
`simulator/simulator.py`), whose choices fill what the paper leaves open. Called by the
controller each round through `policies.registry` as `"pollux"`.

What is implemented
-------------------
- Goodput (§3, Eq. "GOODPUT = THROUGHPUT x EFFICIENCY"), in `policies.pollux.goodput`:
  statistical efficiency EFFICIENCY(M) = (phi + M0)/(phi + M) (§3.1) with the gradient
  noise ratio measured at the job's progress (the catalogue's measured profiles); M0
  is the batch the job's work is counted in (`JobSpec.work_batch`, else its batch);
  throughput from the Pollux model T_iter = (T_grad^gamma + T_sync^gamma)^(1/gamma) with
  T_grad = alpha + beta·m and gradient accumulation above the largest local batch (§3.2).
- PolluxAgent's batch size (§4.1): for each allocation, the global batch M in
  [M0, M_max] (M_max: the largest batch the application was validated at, as the
  artifact's `max_batch_size`; `max_batch_sizes` overrides it), local batch at least
  the smallest profiled one, that maximises goodput; the GPU count is bounded by
  M_max / smallest local batch. The plan's `batch_sizes` carry it for every running
  job; a new batch on the same GPUs costs no restart.
- SPEEDUP_j(A) = max_M GOODPUT_j(A, M) / max_M GOODPUT_j(a_f, M) (§4.2), a_f the fair
  share: ⌈GPUs / jobs⌉ GPUs on as few nodes as hold them (artifact: `fair_replicas`).
- FITNESS_p(A) = (Σ_j SPEEDUP_j(A_j)^p / J)^(1/p) (§4.2), p = -1 by default; p = 0 is
  the geometric mean; 1e-3 is added to each speedup as in the artifact.
- Re-allocation penalty (§4.2): a job whose allocation changes has its speedup
  multiplied by (T_j - R_j·δ) / (T_j + δ), T_j its age, R_j its restarts so far, δ the
  re-allocation delay (30 s, the artifact's `delay`).
- Interference avoidance (§4.2): at most one distributed (multi-node) job per node.
- Prior-driven exploration (§3.2; artifact `max_replicas`): a job gets at most twice
  the most GPUs it has held (`growth_factor`), so it starts on one GPU.
- The search (§4.2, Fig. 4): a genetic algorithm over jobs x nodes matrices with
  mutation, crossover and repair (`policies.pollux.search`), population 100 and 100
  generations as the artifact's NSGA-II run, seeded with the current allocation and
  the previous round's final population, which `Plan.state` carries (the artifact
  keeps it on the policy object). Jobs are ordered by attained service (artifact),
  so repair gives contested GPUs to the jobs that had least.
- Interval: PolluxSched re-optimises every 60 s (§5, artifact `--interval 60`).
- Heterogeneous clusters (issue 31 item 3), as Sia (Jayaram Subramanya et al., SOSP
  2023) extends Pollux: each job's goodput is evaluated per GPU type
  (`policies.pollux.types`: its table on each type's nodes alone, the compute probe on
  that type's GPUs), so that the search chooses a type as well as a count. A row of
  the search reads the table of the one type it holds; a row spanning types reads
  the whole cluster's table scaled by the job's one-GPU goodput on the slowest type
  it holds (a job runs at its slowest GPU, as in Gavel). SPEEDUP is over the fair
  share on the job's best type, so a job that gains much from the fast types counts
  a slow one as a small speedup and one that gains little does not, which is what
  moves fast GPUs to the jobs that gain most from them. `aware=False` is Pollux blind
  to types, as Gavel and Sia compare against (the one whole-cluster table, every GPU
  judged as the largest server's). On a cluster of one type both are the paper's.

Deviations
----------
- Throughput parameters are not fitted online from a job's own step times: they are
  read off `controller.model.perf` for this cluster (two one-GPU probes give alpha and beta,
  one probe per (nodes, GPUs) gives T_sync), as a converged PolluxAgent fit would be.
  For the six measured applications perf applies the fitted `catalog.PolluxFit`; for
  other models it is gpuflow's analytic model. T_sync depends on (nodes, GPUs) only,
  evaluated on a packed placement of the largest nodes (Pollux's model has the same
  inputs); a table per GPU type (above) is built the same way on that type's nodes.
- Against Sia: Sia solves an integer program over per-type configurations (GPU type,
  nodes, GPUs) with one configuration per job, its own goodput normalisation and
  restart factor, and bootstraps each job's throughput model per type from a little
  profiling; here Pollux's genetic search over per-node counts stays, its fitness
  reading the per-type tables above (the throughput parameters per type come from the
  performance model, as on one type), and a row may span types at the slowest type's
  goodput where Sia allows none.
- Batch hysteresis: a running job that keeps its GPUs changes its batch only for a
  goodput gain above `batch_margin` (5 %); AdaptDL changes it whenever the optimum
  moves, which live, with noisy measured statistics, moved one job's batch 12 times in
  two minutes (issue 25).
- A job without gradient statistics (a replay's job of a model without a published
  profile, or a live one before its first report) keeps its batch size: Pollux would
  measure them; gpuflow has none to use until the job reports.
- Accumulation follows perf's model (alpha once per accumulation step, one
  synchronisation) rather than AdaptDL's (the whole T_grad per extra step).
- The batch is chosen on a 32-point geometric grid (AdaptDL: 50) with the noise
  ratio read at progress bucketed to 1/200; tables are cached per application.
- A job that never ran pays no re-allocation penalty to start: gpuflow's first start
  is free (the artifact charges it 30 s). δ defaults to the paper's 30 s; None uses
  the catalogue's restart cost of the model.
- Non-elastic jobs (min = max) get exactly their size or nothing; gpuflow's min_gpus
  is honoured (the artifact uses 0).
- The GA is single-objective (the artifact's NSGA-II also tracks a cluster-size
  objective for autoscaling, which gpuflow does not do) and its operators are
  gpuflow's own (see `pollux_search`); no 16-node cap per job. It stops early once
  the best fitness has not improved for `patience` (10) generations, out of at most
  `generations` (100): warm-started from the last population it mostly converges in
  ten or so, which keeps a 160-job replay within its time budget. Besides the current
  allocation and the last population it is seeded with a greedy allocation (idle
  jobs started on their minimum, best fit), so that rigid multi-node gangs, which
  random mutation rarely assembles, get placed.
- Nodes a job may use and quotas (gpuflow's; the paper's search has no per-job node
  masks and no quotas, the artifact neither cordons nor pod requests): the search's
  capacity is `Snapshot.usable_gpus` (a cordoned node offers only what its jobs
  hold), and it sees the GPU-choice filter's rules (`policies.pollux.limits`): a
  jobs x nodes mask of the nodes each job may be given new GPUs on (GPU models it
  accepts, no cordoned node, CPU and memory for one of its pods; a masked cell keeps
  at most what the job holds there), which repair enforces and mutation's cell draws
  respect, and upper bounds per quota (a limit on its jobs' GPUs, a leaf's GPUs
  within what it holds + its headroom + the spare GPUs, none for a job without a
  quota), which repair enforces by cutting the jobs latest in the priority order
  first. Where a round has none of these (most rounds of most replays) the search
  is the one it always was. The GPU ids the counts become are still asked of the
  filter in priority order (`policies.pollux.place.filtered`, the authority): a job
  refused its new GPUs keeps those it holds where they are still free, else waits
  with the filter's reason. The bounds do not see several quotas borrowing the same
  spare GPUs at once; the filter refuses those. On bench/pollux_limits.py's 100-job
  rounds the filter refused 73 GPUs in 10 rounds (GPU models), 63 (cordons) and 11
  (quotas) of what the search blind to them gave out, and none with them
  (docs/benchmarks.md, "Pollux's search sees the filter"). `limits=False` is the
  blind search.
- At scale the search is split (`policies.pollux.partition`), as POP partitions an
  allocation problem (Narayanan et al., SOSP 2021): above `cells_per_part` (4,096)
  jobs x nodes cells, the nodes form k contiguous blocks (k a power of two), each
  searched with its share of the jobs, running jobs where their GPUs are and the
  others where most GPUs are free; a job then spans one block at most. The fair share
  and the objective stay those of the whole cluster. The artifact searches the whole
  problem, at most a few hundred jobs. On 1,000 jobs on 256x8 a warm round falls from
  3.5-4.8 CPU-s to 0.25-0.5 and FITNESS_p of the whole problem is no lower (0.500
  against 0.498: the smaller searches converge better within `patience`);
  docs/benchmarks.md, "Pollux and Optimus at scale (issue 16)". The Pollux paper's
  workloads (160 jobs on 16 nodes) are searched whole, as before.
- Rounds: gpuflow's simulator runs a round after each arrival or completion; between
  them the plan asks to be woken (`wake_s`) when a running job's efficiency reaches
  its next progress bucket (at once for a job whose speed on new GPUs is still
  unknown, or one judged on gradient statistics it reports live, which may move at any
  report), but never sooner than `interval_s` (60 s) after this round, rather than
  every 60 s whatever happens. Live, the operator asks the policy only at those
  moments (controller.pace), so a decision stands for an interval as in replay.
- A live job that reports its gradient statistics (gpuflow.train, `JobView.measured`)
  is judged on them (`pollux_goodput.live_ratio`), as PolluxAgent's own reports. A
  profiled application's batch range and smallest local batch come from its profile;
  a job of a model without one becomes adaptive with its first usable report, its
  batch from its own initial one to 16x that (`max_batch_sizes` per model), its
  throughput the generic performance model's with its compute and synchronisation
  times scaled to fit the throughput it reported at each size (PolluxAgent fits all
  of §3.2's parameters): `policies.pollux.goodput.fit_scales`.
- Otherwise the gradient noise ratio is read from the measured run at the batch the job runs
  at now, as PolluxAgent reports the statistics of its own training (the artifact's
  policy and simulator alike read them at the job's batch). Where it is infinite (a
  measured gradient norm of zero, deepspeech2 late in training), every sample counts:
  EFFICIENCY = 1, and the batch is chosen for throughput alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.model import Allocation, Cluster, JobStatus, JobView, Plan, Reason, Snapshot
from controller.model.catalog import ModelProfile, resolve
from controller.model.job import does_not_fit
from policies.pollux.goodput import (
    AppKey,
    app_key,
    fit_scales,
    goodput_at_batch,
    goodput_table,
    live_ratio,
    max_useful_gpus,
    next_bucket_s,
    progress_bucket,
    usable_stats,
)
from policies.pollux.limits import cell_caps, needs_limits, quota_bounds, unreachable
from policies.pollux.partition import (
    CELLS_PER_PART,
    Part,
    PartPopulation,
    adapt,
    part_bounds,
    part_count,
    split,
    stitch,
    sub_problem,
)
from policies.pollux.place import filtered, gpu_ids, node_capacity
from policies.pollux.search import Problem, States, fitness, greedy_seed, search
from policies.pollux.types import (
    FloatArray,
    IntArray,
    TableOf,
    row_slot,
    type_split,
    typed_tables,
)

# The goodput gain a new batch must bring a running job that keeps its GPUs: 5 %, so
# that the noise in a job's measured gradient statistics does not move its batch (and
# learning rate) to and fro; gpuflow's choice (AdaptDL re-optimises it continuously).
BATCH_MARGIN = 0.05
NO_GAIN = Reason(
    "NoGoodputGain", "the allocation search found a higher p-norm of speedups without it"
)


@dataclass(frozen=True)
class PolluxState:
    """What one round hands the next: the final GA population of each block of nodes
    searched (one block, the whole cluster, below `CELLS_PER_PART`) and GPU
    high-water marks."""

    parts: tuple[PartPopulation, ...]
    max_held: Mapping[str, int]  # most GPUs each active job has held


@dataclass(frozen=True)
class _Job:
    view: JobView
    profile: ModelProfile
    key: AppKey
    lo: int
    hi: int
    fair_hi: int  # hi without the exploration cap, for the fair share
    bucket: int
    stats_batch: int  # the batch whose measured run gives the job's gradient statistics
    ratio: float | None = None  # the noise ratio a live job measured, when it reports one


@dataclass(frozen=True)
class Pollux:
    p: float = -1.0
    restart_delay_s: float | None = 30.0
    avoid_interference: bool = True
    population: int = 100
    generations: int = 100
    patience: int = 10  # stop after this many generations without improvement; 0: never
    seed: int = 0
    growth_factor: float = 2.0  # 0: no exploration cap
    max_batch_sizes: Mapping[str, int] | None = field(default=None, hash=False)
    interval_s: float = 60.0
    # A running job keeps its batch on the same GPUs unless the best one's goodput is
    # this much higher (hysteresis: each change is a learning-rate change for the
    # training script); gpuflow's choice, see the deviations.
    batch_margin: float = BATCH_MARGIN
    cells_per_part: int = CELLS_PER_PART  # 0: never split the search (`pollux_partition`)
    # Goodput per GPU type on a heterogeneous cluster (`policies.pollux.types`); False:
    # blind to types, every GPU judged as the largest node's (the comparison Gavel and
    # Sia make).
    aware: bool = True
    # The search sees the GPU-choice filter's node masks and quota bounds
    # (`policies.pollux.limits`); False: only node capacities, as before (the bench's
    # and tests' comparison).
    limits: bool = True
    name: str = "pollux"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        prev = state if isinstance(state, PolluxState) else None
        now = snapshot.now_s
        capacity = node_capacity(snapshot)
        total = int(capacity.sum())
        held = self._max_held(snapshot, prev)
        jobs, reasons = self._jobs(snapshot, held, total)
        if not jobs:
            return Plan(run={}, reasons=reasons, state=PolluxState((), held))
        problem, batches = self._problem(snapshot, jobs, capacity, total)
        if problem.cell_cap is not None:
            views = [j.view for j in jobs]
            reasons.update(unreachable(snapshot, views, problem.cell_cap, capacity, problem.lo))
        k = part_count(problem, self.cells_per_part) if self.cells_per_part > 0 else 1
        if k == 1:
            parts = [Part(np.arange(len(jobs)), np.arange(len(capacity)))]
        else:
            parts = split(problem, k)
        bests: list[States] = []
        populations: list[PartPopulation] = []
        whole = problem.base.copy()  # the blocks searched so far at their best
        for index, part in enumerate(parts):
            sub = problem if k == 1 else sub_problem(problem, part)
            if k > 1 and problem.quota is not None:
                sub = part_bounds(problem, sub, part, whole)
            job_ids = [jobs[row].view.job_id for row in part.rows.tolist()]
            nodes = tuple(part.nodes.tolist())
            if not job_ids:
                bests.append(np.zeros((0, len(nodes)), np.float32))
                continue
            seeds = [sub.base[None], greedy_seed(sub)[None]]
            adapted = adapt(prev.parts, job_ids, part.nodes) if prev is not None else None
            if adapted is not None:
                seeds.append(adapted)
            # One stream per block; the whole cluster's (k = 1) is the one it always was.
            key = [self.seed, round(now * 1000)] + ([index] if k > 1 else [])
            result = search(
                sub,
                np.concatenate(seeds),
                population_size=self.population,
                generations=self.generations,
                patience=self.patience,
                rng=np.random.default_rng(key),
            )
            result.population.setflags(write=False)
            bests.append(result.best)
            if k > 1 and problem.quota is not None:
                whole[part.rows] = 0.0
                whole[part.rows[:, None], part.nodes[None, :]] = result.best
            populations.append(PartPopulation(tuple(job_ids), nodes, result.population))
        counts = stitch(len(jobs), len(capacity), parts, bests)
        state = PolluxState(tuple(populations), held)
        return self._plan(snapshot, jobs, counts, batches, reasons, state)

    def objective(self, snapshot: Snapshot, state: Any, run: Mapping[str, Allocation]) -> float:
        """FITNESS_p (§4.2) of the allocations `run` on the round's whole problem, as
        `schedule(snapshot, state)` poses it: what a split search costs against the
        whole one (bench/policy_scale.py, tests/policies/test_pollux_partition.py)."""
        prev = state if isinstance(state, PolluxState) else None
        capacity = node_capacity(snapshot)
        total = int(capacity.sum())
        jobs, _ = self._jobs(snapshot, self._max_held(snapshot, prev), total)
        if not jobs:
            return 0.0
        problem, _ = self._problem(snapshot, jobs, capacity, total)
        counts = np.zeros_like(problem.base)
        for row, job in enumerate(jobs):
            alloc = run.get(job.view.job_id)
            for node, count in alloc.per_node if alloc is not None else ():
                counts[row, node] = count
        return float(fitness(problem, counts[None])[0])

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Least attained service first: the order in which repair settles contested
        GPUs (`_jobs`)."""
        now = snapshot.now_s
        jobs = sorted(
            snapshot.jobs, key=lambda j: (j.attained_gpu_s_at(now), j.spec.submit_s, j.job_id)
        )
        return [j.job_id for j in jobs]

    # -- the problem ----------------------------------------------------------------

    def _max_held(self, snapshot: Snapshot, prev: PolluxState | None) -> dict[str, int]:
        old = prev.max_held if prev is not None else {}
        return {
            j.job_id: max(old.get(j.job_id, 0), j.allocation.num_gpus if j.allocation else 0)
            for j in snapshot.jobs
        }

    def _jobs(
        self, snapshot: Snapshot, held: Mapping[str, int], total: int
    ) -> tuple[list[_Job], dict[str, Reason]]:
        now = snapshot.now_s
        order = sorted(
            snapshot.jobs, key=lambda j: (j.attained_gpu_s_at(now), j.spec.submit_s, j.job_id)
        )
        jobs: list[_Job] = []
        reasons: dict[str, Reason] = {}
        for view in order:
            spec = view.spec
            if spec.min_gpus > total:
                reasons[view.job_id] = does_not_fit(spec.min_gpus, f"{total} are up")
                continue
            profile = resolve(spec.model)
            lo = spec.min_gpus
            m = view.measured
            stats = m is not None and usable_stats(m.grad_sqr, m.grad_var)
            ref = spec.work_batch or spec.batch_size
            key = app_key(
                profile, ref, self.max_batch_sizes, lo, reports_stats=stats, model=spec.model
            )
            if stats and profile.measured is None and m is not None and m.throughput:
                grad_scale, sync_scale = fit_scales(snapshot.cluster, profile, m.throughput)
                key = replace(key, grad_scale=grad_scale, sync_scale=sync_scale)
            fair_hi = hi = lo
            if spec.elastic:
                fair_hi = max(lo, min(spec.max_gpus, max_useful_gpus(profile, key), total))
                hi = fair_hi
                if self.growth_factor > 0:
                    cap = max(1, math.ceil(self.growth_factor * held.get(view.job_id, 0)))
                    hi = max(lo, min(hi, cap))
            bucket = progress_bucket(view.progress_at(now))
            stats_batch = view.batch_size or key.ref_batch
            ratio = live_ratio(key, m.grad_sqr, m.grad_var) if m is not None else None
            jobs.append(_Job(view, profile, key, lo, hi, fair_hi, bucket, stats_batch, ratio))
        return jobs, reasons

    def _problem(
        self, snapshot: Snapshot, jobs: list[_Job], capacity: States, total: int
    ) -> tuple[Problem, list[Any]]:
        now = snapshot.now_s
        nodes = len(capacity)
        fair = -(-total // len(jobs))
        fair_k = [min(max(fair, j.lo), j.fair_hi) for j in jobs]
        kdim = max(max(j.hi for j in jobs), max(fair_k)) + 1
        ndim = min(nodes, kdim - 1) + 1
        by_size = np.cumsum(sorted((n.num_gpus for n in snapshot.cluster.nodes), reverse=True))
        batches: list[Any] = []
        factor = np.ones(len(jobs))
        base = np.zeros((len(jobs), nodes), dtype=np.float32)
        split = type_split(snapshot.cluster) if self.aware else None
        slots = 1 if split is None else len(split.names) + 1
        speedup = np.zeros((len(jobs), slots, ndim, kdim))
        type_factor = None if split is None else np.ones((len(jobs), len(split.names)))
        for row, (job, k_fair) in enumerate(zip(jobs, fair_k, strict=True)):
            if split is not None:
                assert type_factor is not None
                typed = typed_tables(
                    split, snapshot.cluster, self._table_of(job), k_fair, ndim, kdim
                )
                speedup[row] = typed.speedup
                type_factor[row] = typed.factor
                batches.append(typed.best)
            else:
                goodput, best = goodput_table(
                    snapshot.cluster,
                    job.profile,
                    job.key,
                    job.bucket,
                    kdim - 1,
                    job.stats_batch,
                    job.ratio,
                )
                n_fair = min(int(np.searchsorted(by_size, k_fair)) + 1, k_fair)
                reference = float(goodput[n_fair, k_fair])
                if reference <= 0.0:
                    reference = float(goodput.max()) or 1.0
                speedup[row, 0] = goodput[:ndim, :kdim] / reference
                batches.append(((snapshot.cluster, best),))
            view = job.view
            if view.allocation is not None and view.running:
                for node, count in view.allocation.per_node:
                    base[row, node] = count
            factor[row] = self._restart_factor(view, job.profile, now)
        views = [j.view for j in jobs]
        limited = self.limits and needs_limits(snapshot, views)
        room = snapshot.quota_room if limited else None
        problem = Problem(
            capacity=capacity,
            base=base,
            lo=np.array([j.lo for j in jobs], dtype=np.float32),
            hi=np.array([j.hi for j in jobs], dtype=np.float32),
            speedup=speedup.ravel(),
            ndim=ndim,
            kdim=kdim,
            restart_factor=factor,
            p=self.p,
            avoid_interference=self.avoid_interference,
            type_onehot=None if split is None else split.onehot,
            type_factor=type_factor,
            cell_cap=cell_caps(snapshot, views, capacity, base) if limited else None,
            quota=None if room is None else quota_bounds(room, views, base, capacity),
        )
        return problem, batches

    @staticmethod
    def _table_of(job: _Job) -> TableOf:
        """The job's goodput table on a cluster, for `typed_tables`."""

        def table(cluster: Cluster, max_gpus: int) -> tuple[FloatArray, IntArray]:
            return goodput_table(
                cluster, job.profile, job.key, job.bucket, max_gpus, job.stats_batch, job.ratio
            )

        return table

    def _restart_factor(self, view: JobView, profile: ModelProfile, now: float) -> float:
        """(T - R·δ) / (T + δ) (§4.2); 1 for a job that never ran (its start is free)."""
        if view.status is JobStatus.QUEUED:
            return 1.0
        delay = profile.restart_s if self.restart_delay_s is None else self.restart_delay_s
        if delay <= 0.0:
            return 1.0
        age = max(0.0, now - view.spec.submit_s)
        return max(age - view.restarts * delay, 0.0) / (age + delay)

    # -- the plan -------------------------------------------------------------------

    def _plan(
        self,
        snapshot: Snapshot,
        jobs: list[_Job],
        counts: States,
        batches: list[Any],
        reasons: dict[str, Reason],
        state: PolluxState,
    ) -> Plan:
        now = snapshot.now_s
        held = dict(state.max_held)
        split = type_split(snapshot.cluster) if self.aware else None
        run = snapshot.allocations()
        views = [j.view for j in jobs]
        placed = filtered(snapshot, views, gpu_ids(snapshot, views, counts))
        batch_sizes: dict[str, int] = {}
        drift: list[float] = []  # when running jobs' goodput tables move on
        for row, job in enumerate(jobs):
            job_id = job.view.job_id
            alloc = placed[row]
            if alloc is None or isinstance(alloc, Reason):
                if job_id in run:
                    del run[job_id]
                reasons[job_id] = reasons.get(job_id, NO_GAIN) if alloc is None else alloc
                continue
            if alloc is not job.view.allocation:
                run[job_id] = alloc
            held[job_id] = max(held.get(job_id, 0), alloc.num_gpus)
            if alloc.num_gpus != int(counts[row].sum()):
                continue  # kept its GPUs, refused the new ones: its batch stays too
            if job.key.adaptive:
                gpus = int(counts[row].sum())
                nodes = int(np.count_nonzero(counts[row]))
                slot = 0 if split is None else row_slot(split, counts[row])
                batch_sizes[job_id] = self._batch(job, alloc, (nodes, gpus), batches[row][slot])
                kept = alloc is job.view.allocation and batch_sizes[job_id] == job.view.batch_size
                # A job judged on its own gradient statistics may move any time.
                live = job.view.measured is not None and job.view.measured.grad_sqr is not None
                drift.append(next_bucket_s(job.view, now) if kept and not live else now)
        for job_id in list(run):
            if job_id in reasons:
                del run[job_id]
        return Plan(
            run=run,
            reasons=reasons,
            batch_sizes=batch_sizes,
            state=replace(state, max_held=held),
            wake_s=self._wake(now, drift),
        )

    def _batch(
        self, job: _Job, alloc: Allocation, where: tuple[int, int], batched: tuple[Cluster, Any]
    ) -> int:
        """The batch for a job on `alloc`: the best one in the table of the cluster it
        was chosen on (`batched`: the whole cluster's, or its GPU type's), unless the job
        keeps its GPUs and its current batch is within `batch_margin` of the best one's
        goodput."""
        cluster, best = batched
        chosen = int(best[where])
        current = job.view.batch_size
        if alloc is not job.view.allocation or not current or current == chosen:
            return chosen
        args = (cluster, job.profile, job.key, job.bucket, job.stats_batch, job.ratio)
        now_gp = goodput_at_batch(*args, where, current)
        best_gp = goodput_at_batch(*args, where, chosen)
        return current if best_gp <= now_gp * (1.0 + self.batch_margin) else chosen

    def _wake(self, now: float, drift: list[float]) -> float | None:
        """The next round: when a running job's efficiency moves to its next progress
        bucket (at once for a job whose speed is not known yet), never sooner than
        `interval_s`; arrivals and completions bring rounds of their own."""
        if self.interval_s <= 0 or not drift:
            return None
        return max(now + self.interval_s, min(drift))
