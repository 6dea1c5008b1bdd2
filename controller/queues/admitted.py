"""One round's quota figures, computed by controller.queues.admission before the policy
and read after it by controller.queues.reclaim and controller.queues.ledger; and the
reasons a job waits because of a quota."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.model import Allocation, JobView, Reason, Snapshot
from controller.model.queues import QueueTree
from controller.queues.shares import EPS_GPUS


@dataclass(frozen=True)
class Admitted:
    """The round's figures: who belongs where, what each queue holds and deserves."""

    snapshot: Snapshot  # the backend's, whole
    seen: Snapshot  # what the policy is shown
    leaf: Mapping[str, str | None]  # active job id -> its leaf queue
    held: Mapping[str, float]  # every queue: GPUs its running jobs hold
    deserved: Mapping[str, float]  # every queue
    spare_gpus: float  # idle GPUs no queue is owed: lent to any
    hidden: Mapping[str, Reason] = field(default_factory=dict)

    def headroom(self, queue: str) -> float:
        """GPUs `queue` may still take as its own."""
        return max(0.0, self.deserved.get(queue, 0.0) - self.held.get(queue, 0.0))


def gpus_of(alloc: Allocation | None) -> float:
    """GPUs an allocation holds, a shared GPU by its fraction (0 for none)."""
    return 0.0 if alloc is None else alloc.gpu_weight


def no_queue(job: JobView) -> Reason:
    named = f" and queue {job.spec.queue!r} is no leaf queue" if job.spec.queue else ""
    return Reason("NoQueue", f"no queue takes tenant {job.spec.tenant!r}{named}")


def at_limit(tree: QueueTree, leaf: str, held: Mapping[str, float], gpus: float) -> Reason | None:
    """`QueueAtLimit` if `gpus` more for `leaf` pass a limit on its chain, else None."""
    for queue in tree.chain(leaf):
        node = tree.node(queue)
        assert node is not None
        if node.limit is not None and held.get(queue, 0.0) + gpus > node.limit.total + EPS_GPUS:
            return Reason(
                "QueueAtLimit",
                f"queue {queue} holds {held.get(queue, 0.0):g} of its limit of "
                f"{node.limit.total} GPUs",
            )
    return None


def over_share(tree: QueueTree, adm: Admitted, leaf: str) -> Reason:
    node = tree.node(leaf)
    assert node is not None
    return Reason(
        "QueueOverShare",
        f"queue {leaf} holds {adm.held.get(leaf, 0.0):g} GPUs, its share now "
        f"{adm.deserved.get(leaf, 0.0):.1f} (guarantee {node.guarantee.total}); "
        "no idle GPUs to lend",
    )
