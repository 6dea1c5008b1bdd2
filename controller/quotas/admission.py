"""Quota admission and reclaim around any policy: which queues' jobs may take GPUs.

Called by controller.loop.Controller.decide, so the simulator and the Kubernetes
operator get the same step: `Quotas.admit(snapshot)` before the policy, and
`Quotas.settle(admitted, plan)` after it (and after controller.checks' check of the
plan). The policy still orders and sizes the jobs it sees; quotas decide which
jobs it sees, and how many more GPUs each may take (the round's figures travel on the
snapshot shown, `Snapshot.quota_room`: the GPU-choice filter's quota half,
controller.model.quotas.room, which the policies ask where they size and place).

Each round, from the GPUs each leaf holds and its jobs could use (its *demand*:
every active job's `max_gpus`), controller.quotas.shares gives every queue its
*deserved* GPUs: its guarantee (up to its demand), plus a weighted part of what
is left. Then, for a leaf L:

- headroom(L) = deserved(L) - held(L): GPUs L may take as its own;
- spare = free GPUs - what the leaves' waiting jobs can take within their
  headroom: idle GPUs nobody is owed, lent to any queue (borrowing).

A leaf's waiting jobs, in the policy's order, are shown to it while their smallest
sizes together fit every limit on the leaf's chain and its headroom (a gang counts
as the leaf's own if it fits what is left, or leaves the leaf nearer its share than
it is: `within_share`), then the spare GPUs; the others wait with `QueueAtLimit`,
`QueueOverShare` or `NoQueue`. The snapshot shown carries the tree
(`Snapshot.queues`), so that a policy that promises GPUs ahead reads the guarantees
from it (ElasticFlow's deadline admission). After the policy, the plan's starts and
growths are checked the same way (controller.checks: a breach is the policy's
defect), and jobs it stopped in a leaf left below its share are given back their
GPUs (controller.quotas.protect: a decision between queues). Last, reclaim: when
the jobs a leaf is owed (within its share) do not fit the GPUs left free, running
jobs of queues over their share are preempted gracefully (the backend's preemption:
SIGTERM and checkpoint live, progress kept in replay), least loss first, while each
victim's queues stay at or above their deserved GPUs and its leaf at or above its
guarantee, so nothing is taken from a queue at or under its guarantee and no
queue is pushed below its share (which would only swap the roles next round). The
owed jobs wait with `ReclaimPending`; the plan asks to decide again after `grace_s`
so that they start within that round plus the grace period.

With quotas per GPU model, all of this runs per pool of one model's GPUs
(controller.quotas.admitted.Pool), a job counted in each pool it accepts.

Least loss: a graceful preemption loses no progress, only a restart per GPU stopped,
so victims are chosen to stop as few GPUs as cover the deficit: the smallest job
that covers what is left, else the largest and again; ties by the least attained
service (the least work at stake if its checkpoint fails), then job id.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace

from controller.model import JobView, Plan, Reason, Snapshot
from controller.model.quotas import QuotaTree
from controller.model.quotas.room import (
    ANY_POOL,
    EPS_GPUS,
    Pool,
    QuotaRoom,
    at_limit,
    no_queue,
    over_share,
    within_share,
)
from controller.model.waiting import WaitingIndex, WaitingKey
from controller.quotas.admitted import Admission, Admitted
from controller.quotas.ledger import QuotaLedger
from controller.quotas.protect import protect
from controller.quotas.reclaim import reclaim
from controller.quotas.shares import deserved_gpus

# A graceful preemption's grace period: the time a stopped job has to checkpoint and
# exit before its GPUs are free (Kubernetes' terminationGracePeriodSeconds default).
DEFAULT_GRACE_S = 30.0


class Quotas:
    """Admission and reclaim for one queue tree; `ledger` records each round (replays
    read it for their per-queue report; None keeps nothing, as a live operator does)."""

    def __init__(
        self, tree: QuotaTree, *, grace_s: float = DEFAULT_GRACE_S, record: bool = False
    ) -> None:
        self.tree = tree
        self.grace_s = grace_s
        self.ledger: QuotaLedger | None = QuotaLedger(tree) if record else None

    def admit(self, snapshot: Snapshot, order: Sequence[str] = ()) -> Admission:
        """The figures of the round and the snapshot the policy is shown: each leaf's
        waiting jobs, in `order` (the policy's queue order; jobs it leaves out come
        after it, by submission), as long as they fit its headroom, then the spare
        GPUs, and its limits, in a pool the job may run in, so that whichever of them
        the policy starts fits."""
        leaf = {j.job_id: self.tree.leaf_of(j.spec) for j in snapshot.jobs}
        waiting = sorted(snapshot.waiting(), key=_submitted)
        pools = tuple(
            self._figures(snapshot, leaf, waiting, pool) for pool in _pools(self.tree, snapshot)
        )
        hidden = self._hide(pools, _in_order(waiting, order))
        seen = _without(snapshot, hidden.keys()) if hidden else snapshot
        room = QuotaRoom(self.tree, leaf, pools)
        seen = replace(seen, queues=self.tree, quota_room=room)
        return Admission(snapshot, seen, leaf, pools, hidden)

    def _figures(
        self,
        snapshot: Snapshot,
        leaf: dict[str, str | None],
        waiting: list[JobView],
        pool: Pool,
    ) -> Admitted:
        """One pool's held, deserved and spare GPUs."""
        tree = self.tree
        held: dict[str, float] = {}
        demand: dict[str, float] = {}
        outside = 0.0  # held by jobs of no queue: they run on, the queues share the rest
        mine: dict[str, float] = {}  # by leaf; summed up the tree after
        for job in snapshot.jobs:
            name = leaf[job.job_id]
            gpus = pool.gpus(job.allocation) if job.running else 0.0
            if name is None:
                outside += gpus
                continue
            if gpus > 0 or (not job.running and pool.accepts(job.spec)):
                demand[name] = demand.get(name, 0.0) + max(gpus, float(job.spec.max_gpus))
            mine[name] = mine.get(name, 0.0) + gpus
        for name, gpus in mine.items():
            for queue in tree.chain(name):
                held[queue] = held.get(queue, 0.0) + gpus
        down = snapshot.down_nodes
        capacity = sum(
            n.num_gpus
            for i, n in enumerate(snapshot.cluster.nodes)
            if i not in down and (pool.nodes is None or i in pool.nodes)
        )
        deserved = deserved_gpus(tree, max(0.0, capacity - outside), demand, pool.model)
        owed = 0.0
        taken: dict[str, float] = {}
        for job in waiting:
            name = leaf[job.job_id]
            if name is None or not pool.accepts(job.spec):
                continue
            room = max(0.0, deserved[name] - held.get(name, 0.0)) - taken.get(name, 0.0)
            if within_share(room, job.spec.min_gpus):
                taken[name] = taken.get(name, 0.0) + job.spec.min_gpus
                owed += job.spec.min_gpus
        spare = max(0.0, _free_gpus(snapshot, pool) - owed)
        return Admitted(held, deserved, spare, pool, snapshot=snapshot, leaf=leaf)

    def _hide(self, pools: tuple[Admitted, ...], waiting: list[JobView]) -> dict[str, Reason]:
        """The waiting jobs the policy is not shown, with the reason each waits: a job
        is shown if it fits in one pool it may run in (the first such)."""
        leaves = self.tree.leaves()
        room = [{leaf.name: p.headroom(leaf.name) for leaf in leaves} for p in pools]
        spare = [p.spare_gpus for p in pools]
        shown = [dict(p.held) for p in pools]
        hidden: dict[str, Reason] = {}
        limits = self.tree.has_limits
        # One reason per pool and leaf (a queue's figures are the same for all its
        # jobs this round), made when first needed.
        over: dict[tuple[int, str], Reason] = {}
        for job in waiting:
            name = pools[0].leaf.get(job.job_id)
            gpus = float(job.spec.min_gpus)
            if name is None:
                hidden[job.job_id] = no_queue(job)
                continue
            refusal: Reason | None = None
            fits = False
            for k, adm in enumerate(pools):
                if not adm.pool.accepts(job.spec):
                    continue
                limited = at_limit(self.tree, name, shown[k], gpus, adm.pool) if limits else None
                if limited is None and within_share(room[k][name], gpus):
                    room[k][name] -= gpus
                elif limited is None and gpus <= spare[k] + EPS_GPUS:
                    spare[k] -= gpus
                else:
                    if limited is None and (k, name) not in over:
                        over[k, name] = over_share(self.tree, adm, name)
                    refusal = refusal or limited or over[k, name]
                    continue
                if limits:
                    for queue in self.tree.chain(name):
                        shown[k][queue] = shown[k].get(queue, 0.0) + gpus
                fits = True
                break
            if not fits and refusal is not None:
                hidden[job.job_id] = refusal
        return hidden

    def settle(self, adm: Admission, plan: Plan) -> Plan:
        """`plan` (checked against the quotas by controller.checks) with the GPUs of
        jobs it stopped below their queue's share given back, reclaim's preemptions and
        every hidden job's reason."""
        run = dict(plan.run)
        reasons = dict(plan.reasons)
        for figures in adm.pools:
            protect(self.tree, figures, run, reasons)
        reasons.update(adm.hidden)
        victims: dict[str, Reason] = {}
        owed: dict[str, Reason] = {}
        for figures in adm.pools:
            stopped, pending = reclaim(self.tree, figures, run, owed.keys())
            for job_id, reason in stopped.items():
                del run[job_id]
                victims[job_id] = reason
            owed.update(pending)
        wake_s = plan.wake_s
        if victims:
            reasons.update(victims)
            reasons.update(owed)
            due = adm.snapshot.now_s + self.grace_s
            wake_s = due if wake_s is None else min(wake_s, due)
        if self.ledger is not None:
            self.ledger.record(adm, run, victims)
        return Plan(
            run=run,
            reasons=reasons,
            default_reason=plan.default_reason,
            suspend=plan.suspend,
            batch_sizes=plan.batch_sizes,
            state=plan.state,
            wake_s=wake_s,
        )


def _pools(tree: QuotaTree, snapshot: Snapshot) -> list[Pool]:
    """Every GPU as one pool, or one pool per GPU model of the cluster when the
    tree's quotas name models."""
    if not tree.per_model:
        return [ANY_POOL]
    nodes: dict[str, set[int]] = {}
    for i, node in enumerate(snapshot.cluster.nodes):
        nodes.setdefault(node.gpu_type.name, set()).add(i)
    return [Pool(model, frozenset(nodes[model])) for model in sorted(nodes)]


def _free_gpus(snapshot: Snapshot, pool: Pool) -> int:
    """Whole GPUs free in the pool on nodes that take work."""
    if pool.nodes is None:
        return snapshot.free_gpu_count()
    free = snapshot.free_pool()
    return sum(len(free.free_gpus(n)) for n in pool.nodes)


def _submitted(job: JobView) -> tuple[float, str]:
    return (job.spec.submit_s, job.job_id)


def _in_order(waiting: list[JobView], order: Sequence[str]) -> list[JobView]:
    """`waiting` (by submission) in `order`, those it leaves out after."""
    if not order:
        return waiting
    rank = {job_id: k for k, job_id in enumerate(order)}
    last = len(rank)
    return sorted(waiting, key=lambda j: rank.get(j.job_id, last))


class _Shown:
    """The backend's ordered waiting jobs without the hidden ones (a WaitingIndex)."""

    def __init__(self, inner: WaitingIndex, hidden: frozenset[str], asked: int) -> None:
        self.inner = inner
        self.hidden = hidden
        self.asked = asked

    def in_order(self, key: WaitingKey) -> Iterator[JobView]:
        return (j for j in self.inner.in_order(key) if j.job_id not in self.hidden)

    def by_size(self, key: WaitingKey) -> Mapping[int, Iterator[JobView]]:
        out: dict[int, Iterator[JobView]] = {}
        for size, jobs in self.inner.by_size(key).items():
            out[size] = (j for j in jobs if j.job_id not in self.hidden)
        return out

    def gpus_asked(self) -> int:
        return self.asked

    def changes_since(self, mark: int | None) -> tuple[int, Sequence[str] | None]:
        """No mark and no ids (WaitingIndex.changes_since): which jobs the quotas hide
        changes from round to round, so a policy reads every job it is shown."""
        del mark
        return 0, None


def _without(snapshot: Snapshot, hidden: Collection[str]) -> Snapshot:
    """`snapshot` with the waiting jobs in `hidden` left out."""
    gone = frozenset(hidden)
    waiting = tuple(j for j in snapshot.waiting() if j.job_id not in gone)
    running = snapshot.running()
    asked = sum(j.spec.num_gpus for j in waiting)
    return Snapshot(
        now_s=snapshot.now_s,
        cluster=snapshot.cluster,
        jobs=running + waiting,
        placer=snapshot.placer,
        down_nodes=snapshot.down_nodes,
        cordoned_nodes=snapshot.cordoned_nodes,
        pool=snapshot.pool,
        running_jobs=running,
        waiting_jobs=waiting,
        current=snapshot.current,
        ordered=None if snapshot.ordered is None else _Shown(snapshot.ordered, gone, asked),
    )
