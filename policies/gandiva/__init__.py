"""Gandiva: time-slicing, packing, migration and grow-shrink of deep-learning jobs.

Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep Learning", OSDI 2018.
Registered as "gandiva"; the simulator (or the operator) calls `Gandiva.schedule`
every round. This module holds the round and time-slicing; packing and its
introspection are in `policies.gandiva.packing`, migration and grow-shrink in
`policies.gandiva.moves`, the round's editable plan in `policies.gandiva.work`, the
waiting jobs' round-robin order in `policies.gandiva.queue`.

A round, in order:

1. Introspection (§4.2 "introspective mode", §3.2 interference): packs that have run
   a quantum are judged on the summed normalised throughput of their two jobs
   (measured `rate_ips` over solo `nominal_rate_ips`); a pack not above
   1 + `pack_margin` is undone (the guest suspended) and its model pair banned.
2. Waiting jobs, longest waiting first (round-robin: a suspended job re-enters the
   queue at the back), start wherever the placer fits them. A gang that would fit
   one node but finds no room there, or only room spread over nodes, first gets a
   node cleared by migrating up to `max_migrations` running jobs elsewhere, each
   gang whole (§4.1 migration: defragmentation; §3.1 locality).
3. If jobs still wait (the cluster is oversubscribed, §4.2 "reactive mode"):
   grown elastic jobs shrink toward `min_gpus` by what the waiting jobs lack (§4.1
   grow-shrink); low-utilisation jobs are packed onto running jobs of the same gang
   size when the two use under `pack_util_max` of a GPU together and fit its memory
   (§4.1 packing); the rest time-slice (§4.1 suspend-resume, §3.3 intra-job
   predictability): a waiting job takes the GPUs of the running job of its gang
   size whose slice began longest ago, once that slice has lasted `quantum_s`.
   `wake_s` is then the next slice end.
4. If nobody waits: multi-node gangs migrate onto one node that has room (§6.4,
   locality) and elastic jobs grow into idle GPUs (§4.1 grow-shrink).

Each step reads the queue from its head and stops once no job behind can change
anything (`policies.gandiva.queue`), so a round costs what it changes, not the queue's
length. Jobs time-sliced out or unpacked get "Suspended" or "Unpacked"; the first
waiting job of each gang size gets "TimeSliced" (waits for a same-size job's slice to
end), "Fragmented" or "InsufficientGpus"; the jobs behind them share "QueuedBehind".
Slice starts, packs and the waiting jobs' kinds (a cache) travel in `GandivaState`;
the policy keeps nothing on self.

Deviations from the paper:
- The paper suspends only among jobs of one "affinity" (gang size) on a server. Here
  a gang that has waited a quantum and has no same-size partner may also suspend
  several expired smaller jobs of one node, so that large gangs cannot starve.
- Jobs on shared GPUs are never time-sliced out; a pack lives until introspection
  undoes it or a member ends.
- Packing uses MPS shares (the model's `GpuShare.fraction`) rather than plain
  time-sharing: each job gets its utilisation plus half the spare, so that neither is
  capped. Giving a running job a share restarts it (an allocation that differs only
  in fractions is a migration in the model). Packs are two jobs of one gang size on
  one node; the paper does not limit packs to pairs, nor describe their placement.
- Introspection judges a pack once, against `nominal_rate_ips` (the speed on the best
  placement of the asked-for GPUs, which a single-node pack on a homogeneous node
  has alone), and bans the model pair rather than the job pair.
- A job's utilisation is the one the paper's profiling measures (§3.2, §4.2) where
  the job has one (`JobSpec.gpu_util`: measured by the node agent live, or given by
  its trace; the view's `util_source` says which); otherwise the catalogue's figure
  for its model stands in for that profiling.
- Jobs without `gpu_mem_mib` are packed with the catalogue's `mem_mib` when
  `share_unsized` (the JobSpec convention reads None as "not shareable").
- Priorities are ignored: the paper has none. Elastic jobs start at `num_gpus`.
- Heterogeneous clusters (gpuflow's, issue 31 item 3; the paper's cluster has one
  GPU type per server and does not choose between types): every placement the round
  makes through the placer (a start, a migration's destination, a grown job's new
  GPUs) goes to the GPU type on which the job runs fastest at that size, among those
  with room (`controller.model.gpu_choice.gpu_type`), else across types at the slowest GPU's
  speed. Packing and time-slicing pair jobs on the GPUs the partner already holds,
  whatever their type, and migration's defragmentation clears a node of the type the
  waiting gang would be placed on. On a cluster of one type the placer is used as is,
  and `aware=False` uses it as is on any cluster (blind to types).
- Nodes a job may use (gpuflow's; the paper has neither cordons nor pod requests):
  every start goes through the placer, whose wrapper applies the GPU-choice filter
  (controller.model.gpu_choice.candidates), and the GPUs Gandiva gives without a placer ask the
  filter first (`Work.allows`): a victim's GPUs in a time-slice swap, a packed share,
  a node cleared for a gang; so no cordoned node, no GPU model the job refuses and
  no node without CPU or memory for its pod is given.
- Migration budget per round, the packing threshold and margin are gpuflow's choices;
  the paper gives no numbers for them.
- Restart cost: a grow or a migration for locality (step 4), made for the job's own
  speed, is made only when the time it saves on the job's remaining work exceeds its
  model's `restart_s` (`gandiva_moves.pays_restart`); the paper restarts from a
  checkpoint to grow or migrate (§4.1) without weighing the cost. Time-slicing's
  cost is bounded by the quantum as in the paper (§6: the 60 s quantum keeps the
  suspend-resume cost to 2 % or less); packing's restart by introspection, which
  judges a pack only after it has run a quantum past both jobs' restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from controller.model import Allocation, JobView, Plan, Reason, Snapshot
from controller.model.gpu_choice.gpu_type import type_placer
from controller.model.job import short_of_gpus
from policies.gandiva.moves import consolidate, defragment, grow, movers_by_node, shrink_for
from policies.gandiva.packing import Pack, PackOptions, introspect, pack_waiting
from policies.gandiva.queue import RoundRobin, WaitingKinds, Walk, gandiva_key, waiting_kinds
from policies.gandiva.work import Work

# Gandiva's time slice: jobs are suspended and resumed about once a minute (§4.1,
# §6: 60 s, which keeps the 100 ms-1 s suspend-resume cost to 2% or less).
QUANTUM_S = 60.0


@dataclass(frozen=True)
class GandivaState:
    """Cross-round memory: when each running job's slice began, the live packs, the
    model pairs introspection found not worth packing, and the kinds of the waiting
    jobs as of the last round (a cache: None reads them afresh)."""

    slice_start_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    packs: tuple[Pack, ...] = ()
    banned_pairs: frozenset[tuple[str, str]] = frozenset()
    kinds: WaitingKinds | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Gandiva:
    quantum_s: float = QUANTUM_S
    pack_util_max: float = 1.0  # pack while the pair uses less than one GPU (§4.1)
    pack_margin: float = 0.0  # keep a pack when its normalised throughput > 1 + margin
    max_migrations: int = 2  # per round; gpuflow's bound, the paper gives none
    share_unsized: bool = True
    # Place each job on its fastest GPU type with room (controller.model.gpu_choice.gpu_type);
    # False: blind to types, the backend's placer as it is (the comparison of Gavel §7).
    aware: bool = True
    name: str = "gandiva"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        prev = state if isinstance(state, GandivaState) else GandivaState()
        if self.aware:
            snapshot = snapshot.with_placer(type_placer(snapshot))  # the fastest GPU type
        work = Work(snapshot, share_unsized=self.share_unsized, migrations=self.max_migrations)
        packs, banned = introspect(
            work, prev.packs, prev.banned_pairs, quantum_s=self.quantum_s, margin=self.pack_margin
        )
        queue = RoundRobin(snapshot, work.run, work.touched)
        kinds = waiting_kinds(snapshot, prev.kinds)
        _place(work, queue.walk())
        if queue.count():
            if shrink_for(work, queue.gpus_asked, min(queue.heads(), default=0)):
                _place(work, queue.walk())
            options = PackOptions(self.pack_util_max, self.share_unsized)
            pack_waiting(work, queue, kinds, packs, banned, options)
            self._time_slice(work, queue.walk(), prev.slice_start_s)
        else:
            consolidate(work)
            grow(work)
        waiting = queue.count()
        default = _explain(work, queue, waiting)
        slices = _slices(work, prev.slice_start_s)
        return Plan(
            run=work.run,
            reasons=work.reasons,
            default_reason=default,
            suspend=frozenset(work.suspend),
            state=GandivaState(MappingProxyType(slices), tuple(packs), banned, kinds),
            wake_s=self._wake(work, slices, packs, bool(waiting or work.suspend)),
        )

    def queue_order(self, snapshot: Snapshot, state: Any) -> list[str]:
        """Round-robin: longest waiting first; a running job, were it sliced out now,
        would go to the back."""
        now = snapshot.now_s
        jobs = sorted(
            snapshot.jobs, key=lambda j: (now if j.running else j.waiting_since_s, j.job_id)
        )
        return [j.job_id for j in jobs]

    def _time_slice(self, work: Work, waiting: Walk, slices: Mapping[str, float]) -> None:
        """Swap waiting jobs in for running ones whose slice has run out. A gang size is
        closed once it has no victim left and cannot clear a node (or is too new to);
        the walk ends when no expired job is left to swap out."""
        by_size, by_node = _expired(work, slices, self.quantum_s)
        if not by_size:
            return
        for job in waiting:
            n = job.spec.num_gpus
            victim = _pop_settled(work, by_size.get(n), job)
            if victim is not None:
                work.swap(victim, job, _sliced_out(victim, job, self.quantum_s))
                continue
            if n > 1 and work.now - job.waiting_since_s < self.quantum_s:
                waiting.close(n)  # the jobs behind are newer still; not a dead end
            elif not _clear_node(work, job, by_node, self.quantum_s):
                waiting.close(n)
            if not any(by_size.values()):
                return  # no expired job is left to swap out

    def _wake(
        self, work: Work, slices: Mapping[str, float], packs: Iterable[Pack], waiting: bool
    ) -> float | None:
        """The next slice end while jobs wait, or the next pack to judge."""
        now, quantum = work.now, self.quantum_s
        times = [p.since_s + quantum for p in packs if not p.verified]
        if waiting:
            times.extend(s + quantum for s in slices.values() if s + quantum > now)
        return min((t for t in times if t > now), default=None)


def _place(work: Work, waiting: Walk) -> None:
    """Start the jobs that fit, in order, migrating others to keep a gang that fits a
    node on one node. The free GPUs only fall, so a size is closed once they are too
    few for it."""
    pool, placer = work.pool, work.snapshot.placer
    largest_node = work.snapshot.cluster.max_gpus_per_node
    movers: dict[int, list[JobView]] | None = None
    hopeless: set[int] = set()  # sizes no migration could make room for
    for job in waiting:
        n = job.spec.num_gpus
        if pool.total_free < n:
            if pool.total_free == 0:
                return
            waiting.close(n)
            continue
        alloc = placer.place(pool, job, n)
        if alloc is not None and work.chooser.quota_refusal(job, alloc) is not None:
            continue  # its queue allows no more this round: it waits, the others may not
        if (alloc is None or len(alloc.nodes) > 1) and n <= largest_node and n not in hopeless:
            if movers is None:
                movers = movers_by_node(work)
            if defragment(work, job, movers):
                continue
            hopeless.add(n)
        if alloc is not None:
            work.start(job, alloc)


def _expired(
    work: Work, slices: Mapping[str, float], quantum_s: float
) -> tuple[dict[int, list[JobView]], dict[int, list[JobView]]]:
    """Running jobs on whole GPUs whose slice has lasted a quantum, longest first:
    by gang size, and (single-node ones) by node. Lists are popped from the end."""
    expired: list[tuple[float, str, JobView]] = []
    cutoff = work.now - quantum_s
    for job in work.snapshot.running():
        start = slices.get(job.job_id, job.mark_s)  # unknown to the state: last change
        # Read every round for every running job: the cheap test first.
        if start <= cutoff and work.settled(job) and not _shared(job):
            expired.append((start, job.job_id, job))
    expired.sort(reverse=True)
    by_size: dict[int, list[JobView]] = {}
    by_node: dict[int, list[JobView]] = {}
    for _, _, job in expired:
        alloc = job.allocation
        assert alloc is not None
        by_size.setdefault(alloc.num_gpus, []).append(job)
        if len(alloc.nodes) == 1:
            by_node.setdefault(alloc.nodes[0], []).append(job)
    return by_size, by_node


def _pop_settled(work: Work, jobs: list[JobView] | None, job: JobView) -> JobView | None:
    """The longest-running settled job of `jobs` (popped; unsettled ones dropped) whose
    GPUs the filter gives `job`; a settled one it refuses stays for the next job."""
    if not jobs:
        return None
    for i in range(len(jobs) - 1, -1, -1):
        victim = jobs[i]
        if not work.settled(victim):
            del jobs[i]
        elif work.swap_allowed(victim, job):
            del jobs[i]
            return victim
    return None


def _clear_node(
    work: Work, job: JobView, by_node: dict[int, list[JobView]], quantum_s: float
) -> bool:
    """Suspend the fewest expired smaller jobs of one node so that `job` fits there."""
    n = job.spec.num_gpus
    best: tuple[tuple[int, int], list[JobView]] | None = None
    for node, candidates in by_node.items():
        if work.snapshot.cluster.nodes[node].num_gpus < n or not _takes(work, job, node):
            continue
        lacking = n - len(work.pool.free_gpus(node))
        chosen: list[JobView] = []
        for victim in reversed(candidates):  # longest-running first
            if lacking <= 0:
                break
            if victim.num_gpus < n and work.settled(victim):
                chosen.append(victim)
                lacking -= victim.num_gpus
        if chosen and lacking <= 0 and (best is None or (len(chosen), node) < best[0]):
            best = ((len(chosen), node), chosen)
    if best is None:
        return False
    (_, node), victims = best
    for victim in victims:
        work.suspend_job(victim, _sliced_out(victim, job, quantum_s))
    alloc = work.snapshot.placer.place(work.pool, job, n)
    if alloc is None:  # a placer that does not look at the cleared node: take it
        alloc = Allocation.whole((node, g) for g in work.pool.free_gpus(node)[:n])
        if alloc.num_gpus < n or not work.allows(job, alloc):
            return True  # the victims' GPUs go to the jobs behind
    work.start(job, alloc)
    return True


def _takes(work: Work, job: JobView, node: int) -> bool:
    """Whether the filter lets waiting `job` onto `node` at all (asked before any job
    there is sliced out for it: a cordoned node, a GPU model it refuses, a node
    without CPU or memory for its pod even now, a queue that allows no more)."""
    return work.allows(job, Allocation.whole((node, g) for g in range(job.spec.num_gpus)))


def _sliced_out(victim: JobView, by: JobView, quantum_s: float) -> Reason:
    return Reason(
        "Suspended",
        f"time-sliced out after a {quantum_s:g} s slice; job {by.job_id} runs on its GPUs",
    )


def _explain(work: Work, queue: RoundRobin, waiting: int) -> Reason:
    """Give the first job still waiting of each gang size its reason; returns the
    reason the jobs behind them share (the plan's default)."""
    running_sizes = {a.num_gpus for a in work.run.values()}
    free = work.pool.total_free
    heads = queue.heads()
    for n, job in heads.items():
        work.reasons[job.job_id] = _waiting_reason(n, free, n in running_sizes)
    if not heads:
        return Reason("Waiting", "waiting for GPUs")
    first = min(heads.values(), key=gandiva_key)
    return Reason(
        "QueuedBehind",
        f"waiting behind job {first.job_id} at the head of the round-robin queue "
        f"(longest waiting first), and {waiting - len(heads)} more behind",
    )


def _waiting_reason(n: int, free: int, same_size_runs: bool) -> Reason:
    if same_size_runs:
        return Reason("TimeSliced", f"waits for a {n}-GPU job's time slice to end (round-robin)")
    return short_of_gpus(n, free, " but scattered")


def _slices(work: Work, prev: Mapping[str, float]) -> dict[str, float]:
    """Slice starts of the jobs that run after the round: now for those (re)started
    or moved, the last change for running jobs the state does not know."""
    out: dict[str, float] = {}
    run, touched, now = work.run, work.touched, work.now
    for job in work.snapshot.running():
        if job.job_id in run and job.job_id not in touched:
            out[job.job_id] = prev.get(job.job_id, job.mark_s)
    for job_id in touched:
        if job_id in run:
            out[job_id] = now
    return out


def _shared(job: JobView) -> bool:
    return job.allocation is not None and job.allocation.shared
