"""One round's quota figures, computed by controller.quotas.admission before the policy
and read after it by controller.quotas.fence, controller.quotas.reclaim and
controller.quotas.ledger; and the reasons a job waits because of a quota.

Quotas are kept per *pool*: the GPUs of one model when the tree's quotas name models
(each model its own division, guarantees and limits read for that model), or every
GPU (`ANY_POOL`) when they are plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.model import Allocation, JobSpec, JobView, Reason, Snapshot
from controller.model.quotas import ANY_MODEL, GpuQuota, QueueTree
from controller.quotas.shares import EPS_GPUS


@dataclass(frozen=True, slots=True)
class Pool:
    """The GPUs of `model` on `nodes` (None: every GPU of every node)."""

    model: str = ANY_MODEL
    nodes: frozenset[int] | None = None

    def gpus(self, alloc: Allocation | None) -> float:
        """GPUs of an allocation in this pool, a shared GPU by its fraction."""
        if alloc is None:
            return 0.0
        if self.nodes is None:
            return alloc.gpu_weight
        return sum(s.fraction for s in alloc.shares if s.node in self.nodes)

    def amount(self, quota: GpuQuota) -> float:
        """A quota's GPUs in this pool."""
        return float(quota.total if self.model == ANY_MODEL else quota.get(self.model))

    def accepts(self, spec: JobSpec) -> bool:
        return self.model == ANY_MODEL or spec.accepts(self.model)

    def label(self) -> str:
        return "" if self.model == ANY_MODEL else f" {self.model}"


ANY_POOL = Pool()


@dataclass(frozen=True)
class Admitted:
    """One pool's figures for the round: who belongs where, what each queue holds and
    deserves there."""

    snapshot: Snapshot  # the backend's, whole
    leaf: Mapping[str, str | None]  # active job id -> its leaf queue
    held: Mapping[str, float]  # every queue: GPUs its running jobs hold in the pool
    deserved: Mapping[str, float]  # every queue
    spare_gpus: float  # idle GPUs of the pool no queue is owed: lent to any
    pool: Pool = ANY_POOL

    def headroom(self, queue: str) -> float:
        """GPUs `queue` may still take as its own in the pool."""
        return max(0.0, self.deserved.get(queue, 0.0) - self.held.get(queue, 0.0))


@dataclass(frozen=True)
class Admission:
    """The round: each pool's figures, what the policy is shown, why the rest waits."""

    snapshot: Snapshot
    seen: Snapshot
    leaf: Mapping[str, str | None]
    pools: tuple[Admitted, ...]
    hidden: Mapping[str, Reason] = field(default_factory=dict)

    def deserved(self, queue: str) -> float:
        """`queue`'s deserved GPUs over every pool."""
        return sum(p.deserved.get(queue, 0.0) for p in self.pools)


def within_share(room_gpus: float, gpus: float) -> bool:
    """Whether `gpus` more may be taken as the queue's own with `room_gpus` of headroom
    left: if they fit, or if they leave the queue nearer its share than it is (a gang
    larger than what is left passes the share by less than it was short: Volcano
    likewise admits while a queue is under its deserved share); else they must be
    borrowed."""
    return gpus <= room_gpus + EPS_GPUS or gpus < 2.0 * room_gpus - EPS_GPUS


def no_queue(job: JobView) -> Reason:
    named = f" and queue {job.spec.queue!r} is no leaf queue" if job.spec.queue else ""
    return Reason("NoQueue", f"no queue takes tenant {job.spec.tenant!r}{named}")


def at_limit(
    tree: QueueTree, leaf: str, held: Mapping[str, float], gpus: float, pool: Pool = ANY_POOL
) -> Reason | None:
    """`QueueAtLimit` if `gpus` more for `leaf` pass a limit on its chain, else None."""
    for queue in tree.chain(leaf):
        node = tree.node(queue)
        assert node is not None
        if node.limit is None:
            continue
        limit = pool.amount(node.limit)
        if held.get(queue, 0.0) + gpus > limit + EPS_GPUS:
            return Reason(
                "QueueAtLimit",
                f"queue {queue} holds {held.get(queue, 0.0):g} of its limit of "
                f"{limit:g}{pool.label()} GPUs",
            )
    return None


def over_share(tree: QueueTree, adm: Admitted, leaf: str) -> Reason:
    node = tree.node(leaf)
    assert node is not None
    label = adm.pool.label()
    return Reason(
        "QueueOverShare",
        f"queue {leaf} holds {adm.held.get(leaf, 0.0):g}{label} GPUs, its share now "
        f"{adm.deserved.get(leaf, 0.0):.1f} (guarantee {adm.pool.amount(node.guarantee):g}); "
        "no idle GPUs to lend",
    )
