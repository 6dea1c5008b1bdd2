"""Quota admission and reclaim around any policy: which queues' jobs may take GPUs.

Called by controller.loop.Controller.decide, so the simulator and the Kubernetes
operator get the same step: `Quotas.admit(snapshot)` before the policy, and
`Quotas.settle(admitted, plan)` after it (and after controller.maintenance's
fence). The policy still orders and sizes the jobs it sees; quotas decide which
jobs it sees and take back what it may not give.

Each round, from the GPUs each leaf holds and its jobs could use (its *demand*:
every active job's `max_gpus`), controller.queues.shares gives every queue its
*deserved* GPUs: its guarantee (up to its demand), plus a weighted part of what
is left. Then, for a leaf L:

- headroom(L) = deserved(L) - held(L): GPUs L may take as its own;
- spare = free GPUs - what the leaves' waiting jobs can take within their
  headroom: idle GPUs nobody is owed, lent to any queue (borrowing).

A waiting job is shown to the policy if its smallest size fits every limit on its
chain and fits headroom(L) or spare; otherwise it waits with `QueueAtLimit`,
`QueueOverShare` or `NoQueue`. After the policy, the plan's starts and growths are
checked the same way in submission order (headroom first, then spare) and any excess
is refused, since one round may start several jobs of a queue. Last, reclaim: when
the jobs a leaf is owed (they fit its headroom) do not fit the GPUs left free, running
jobs of queues over their share are preempted gracefully (the backend's preemption:
SIGTERM and checkpoint live, progress kept in replay), least loss first, while each
victim's queues stay at or above their deserved GPUs and its leaf at or above its
guarantee, so nothing is taken from a queue at or under its guarantee and no
queue is pushed below its share (which would only swap the roles next round). The
owed jobs wait with `ReclaimPending`; the plan asks to decide again after `grace_s`
so that they start within that round plus the grace period.

Least loss: a graceful preemption loses no progress, only a restart per GPU stopped,
so victims are chosen to stop as few GPUs as cover the deficit: the smallest job
that covers what is left, else the largest and again; ties by the least attained
service (the least work at stake if its checkpoint fails), then job id.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from controller.model import JobView, Plan, Reason, Snapshot
from controller.model.queues import QueueTree
from controller.model.waiting import WaitingIndex, WaitingKey
from controller.queues.admitted import Admitted, at_limit, no_queue, over_share
from controller.queues.fence import fence_growth, protect
from controller.queues.ledger import QueueLedger
from controller.queues.reclaim import reclaim
from controller.queues.shares import EPS_GPUS, deserved_gpus

# A graceful preemption's grace period: the time a stopped job has to checkpoint and
# exit before its GPUs are free (Kubernetes' terminationGracePeriodSeconds default).
DEFAULT_GRACE_S = 30.0


class Quotas:
    """Admission and reclaim for one queue tree; `ledger` records each round (replays
    read it for their per-queue report; None keeps nothing, as a live operator does)."""

    def __init__(
        self, tree: QueueTree, *, grace_s: float = DEFAULT_GRACE_S, record: bool = False
    ) -> None:
        self.tree = tree
        self.grace_s = grace_s
        self.ledger: QueueLedger | None = QueueLedger(tree) if record else None

    def admit(self, snapshot: Snapshot, order: Sequence[str] = ()) -> Admitted:
        """The figures of the round and the snapshot the policy is shown: each leaf's
        waiting jobs, in `order` (the policy's queue order; jobs it leaves out come
        after it, by submission), as long as they fit its headroom, then the spare
        GPUs, and its limits, so that whichever of them the policy starts fits."""
        tree = self.tree
        leaf = {j.job_id: tree.leaf_of(j.spec) for j in snapshot.jobs}
        held: dict[str, float] = {}
        demand: dict[str, float] = {}
        outside = 0.0  # held by jobs of no queue: they run on, the queues share the rest
        for job in snapshot.jobs:
            name = leaf[job.job_id]
            weight = job.allocation.gpu_weight if job.running and job.allocation else 0.0
            if name is None:
                outside += weight
                continue
            demand[name] = demand.get(name, 0.0) + max(weight, float(job.spec.max_gpus))
            for queue in tree.chain(name):
                held[queue] = held.get(queue, 0.0) + weight
        down = snapshot.down_nodes
        capacity = sum(n.num_gpus for i, n in enumerate(snapshot.cluster.nodes) if i not in down)
        deserved = deserved_gpus(tree, max(0.0, capacity - outside), demand)
        waiting = sorted(snapshot.waiting(), key=_submitted)
        owed = 0.0
        taken: dict[str, float] = {}
        for job in waiting:
            name = leaf[job.job_id]
            if name is None:
                continue
            room = max(0.0, deserved[name] - held.get(name, 0.0)) - taken.get(name, 0.0)
            if job.spec.min_gpus <= room + EPS_GPUS:
                taken[name] = taken.get(name, 0.0) + job.spec.min_gpus
                owed += job.spec.min_gpus
        spare = max(0.0, snapshot.free_gpu_count() - owed)
        adm = Admitted(snapshot, snapshot, leaf, held, deserved, spare)
        hidden = self._hide(adm, _in_order(waiting, order))
        seen = _without(snapshot, hidden.keys()) if hidden else snapshot
        return Admitted(snapshot, seen, leaf, held, deserved, spare, hidden)

    def _hide(self, adm: Admitted, waiting: list[JobView]) -> dict[str, Reason]:
        """The waiting jobs the policy is not shown, with the reason each waits."""
        room = {leaf.name: adm.headroom(leaf.name) for leaf in self.tree.leaves()}
        spare = adm.spare_gpus
        shown = dict(adm.held)
        hidden: dict[str, Reason] = {}
        for job in waiting:
            name = adm.leaf.get(job.job_id)
            gpus = float(job.spec.min_gpus)
            if name is None:
                hidden[job.job_id] = no_queue(job)
                continue
            limited = at_limit(self.tree, name, shown, gpus)
            if limited is not None:
                hidden[job.job_id] = limited
                continue
            if gpus <= room[name] + EPS_GPUS:
                room[name] -= gpus
            elif gpus <= spare + EPS_GPUS:
                spare -= gpus
            else:
                hidden[job.job_id] = over_share(self.tree, adm, name)
                continue
            for queue in self.tree.chain(name):
                shown[queue] = shown.get(queue, 0.0) + gpus
        return hidden

    def settle(self, adm: Admitted, plan: Plan) -> Plan:
        """`plan` within the quotas, with reclaim preemptions and every hidden job's reason."""
        run, reasons = fence_growth(self.tree, adm, plan)
        protect(self.tree, adm, run, reasons)
        reasons.update(adm.hidden)
        victims, owed = reclaim(self.tree, adm, run)
        wake_s = plan.wake_s
        if victims:
            for job_id, reason in victims.items():
                del run[job_id]
                reasons[job_id] = reason
            for job_id, reason in owed.items():
                reasons[job_id] = reason
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
