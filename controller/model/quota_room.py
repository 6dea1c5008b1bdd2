"""The quota half of the GPU-choice filter: how many more GPUs a job's queue allows.

controller.quotas.admission computes each round's figures before the policy (per
pool: the GPUs each queue holds and deserves, and the spare GPUs no queue is owed)
and hands them to the policy on its snapshot (`Snapshot.quota_room`, a `QuotaRoom`).
A policy that gives a job more GPUs than its smallest size (growth, an elastic
start) asks `QuotaRoom.start(snapshot.current)` for one plan's `QuotaUse` and, job
by job, `more_gpus` (the most it may add), `refusal` (why an allocation does not pass
the quota) and `grant` (the allocation taken: the leaf's headroom falls for the next
job).
After the policy controller.checks checks the whole plan with the same rule
(`plan_quota_refusals`, through controller.model.candidates.plan_refusals).

The rule, one for admission, the check and the policies: a leaf L may take g more
GPUs in a pool if no limit on its chain is passed (`at_limit`), and either g is
within its share (`within_share` of its headroom deserved(L) - held(L), plus what
the plan released of L's own jobs), or the part beyond its headroom fits the spare
GPUs (borrowing). With quotas per GPU model, each pool (`Pool`: one model's GPUs)
is counted apart, a job in each pool it holds GPUs of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controller.model.allocation import Allocation
from controller.model.job import JobSpec, JobView, Reason
from controller.model.quotas import ANY_MODEL, GpuQuota, QueueTree

# GPU amounts are fractional (shared GPUs count by fraction): anything closer than
# this is equal, well below the smallest share a GPU can be split into.
EPS_GPUS = 1e-6


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
class PoolFigures:
    """One pool's figures for the round: what each queue holds and deserves there."""

    held: Mapping[str, float]  # every queue: GPUs its running jobs hold in the pool
    deserved: Mapping[str, float]  # every queue
    spare_gpus: float  # idle GPUs of the pool no queue is owed: lent to any
    pool: Pool = ANY_POOL

    def headroom(self, queue: str) -> float:
        """GPUs `queue` may still take as its own in the pool."""
        return max(0.0, self.deserved.get(queue, 0.0) - self.held.get(queue, 0.0))


def within_share(room_gpus: float, gpus: float) -> bool:
    """Whether `gpus` more may be taken as the queue's own with `room_gpus` of headroom
    left: if they fit, or if they leave the queue nearer its share than it is (a gang
    larger than what is left passes the share by less than it was short: Volcano
    likewise admits while a queue is under its deserved share); else they must be
    borrowed."""
    return gpus <= room_gpus + EPS_GPUS or gpus < 2.0 * room_gpus - EPS_GPUS


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


def limit_room(tree: QueueTree, leaf: str, held: Mapping[str, float], pool: Pool) -> float:
    """The most GPUs `leaf` may add in `pool` before a limit on its chain (`at_limit`)."""
    room = float("inf")
    for queue in tree.chain(leaf):
        node = tree.node(queue)
        assert node is not None
        if node.limit is not None:
            room = min(room, pool.amount(node.limit) - held.get(queue, 0.0))
    return max(0.0, room)


def no_queue(job: JobView) -> Reason:
    named = f" and queue {job.spec.queue!r} is no leaf queue" if job.spec.queue else ""
    return Reason("NoQueue", f"no queue takes tenant {job.spec.tenant!r}{named}")


def over_share(tree: QueueTree, figures: PoolFigures, leaf: str) -> Reason:
    node = tree.node(leaf)
    assert node is not None
    label = figures.pool.label()
    return Reason(
        "QueueOverShare",
        f"queue {leaf} holds {figures.held.get(leaf, 0.0):g}{label} GPUs, its share now "
        f"{figures.deserved.get(leaf, 0.0):.1f} "
        f"(guarantee {figures.pool.amount(node.guarantee):g}); no idle GPUs to lend",
    )


@dataclass(frozen=True)
class QuotaRoom:
    """The round's quota figures, as a policy is shown them (`Snapshot.quota_room`)."""

    tree: QueueTree
    leaf: Mapping[str, str | None]  # active job id -> its leaf queue
    pools: tuple[PoolFigures, ...]

    def start(
        self, current: Mapping[str, Allocation], run: Mapping[str, Allocation] | None = None
    ) -> QuotaUse:
        """One plan's use of the figures, from the running jobs' allocations `current`;
        with `run` (a whole plan, for the check), what it releases of each leaf's jobs
        (stops, shrinks) counted back into the leaf's headroom first."""
        return QuotaUse(self, current, run)


class QuotaUse:
    """What one plan has taken of the round's quota figures (module docstring)."""

    def __init__(
        self,
        room: QuotaRoom,
        current: Mapping[str, Allocation],
        run: Mapping[str, Allocation] | None = None,
    ) -> None:
        self.tree = room.tree
        self.leaf = room.leaf
        self.figures = room.pools
        self.current = current
        self.room = [{q.name: f.headroom(q.name) for q in self.tree.leaves()} for f in room.pools]
        self.spare = [f.spare_gpus for f in room.pools]
        self.held = [dict(f.held) for f in room.pools]
        if run is not None:
            for job_id in current:
                self.release(job_id, run.get(job_id))

    def release(self, job_id: str, after: Allocation | None) -> None:
        """A running job left with `after` (None: stopped): what it gives back of its
        leaf's GPUs the leaf may use again this plan."""
        name = self.leaf.get(job_id)
        before = self.current.get(job_id)
        if name is None or before is None:
            return
        for k, figures in enumerate(self.figures):
            change = figures.pool.gpus(after) - figures.pool.gpus(before)
            if change < 0:
                self.room[k][name] -= change

    def gains(self, job: JobView, alloc: Allocation) -> list[tuple[int, float]]:
        """(pool index, GPUs) that `alloc` gives the job beyond what it holds."""
        before = self.current.get(job.job_id)
        out = []
        for k, figures in enumerate(self.figures):
            gain = figures.pool.gpus(alloc) - figures.pool.gpus(before)
            if gain > EPS_GPUS:
                out.append((k, gain))
        return out

    def refusal(self, job: JobView, alloc: Allocation) -> Reason | None:
        """Why the job's queue does not allow `alloc` (its GPUs beyond those it holds),
        or None."""
        gains = self.gains(job, alloc)
        if not gains:
            return None
        name = self.leaf.get(job.job_id)
        if name is None:
            return no_queue(job)
        for k, gain in gains:
            figures = self.figures[k]
            limited = at_limit(self.tree, name, self.held[k], gain, figures.pool)
            if limited is not None:
                return limited
            room = self.room[k][name]
            own = gain if within_share(room, gain) else max(0.0, min(room, gain))
            if gain - own > self.spare[k] + EPS_GPUS:
                return over_share(self.tree, figures, name)
        return None

    def grant(self, job: JobView, alloc: Allocation) -> None:
        """Record `alloc` given to the job (allowed by `refusal`): its leaf's headroom
        falls, the spare GPUs it borrows too, and its chain holds the GPUs."""
        name = self.leaf.get(job.job_id)
        if name is None:
            return
        for k, gain in self.gains(job, alloc):
            room = self.room[k][name]
            own = gain if within_share(room, gain) else max(0.0, min(room, gain))
            self.room[k][name] -= own
            self.spare[k] -= max(0.0, gain - own)
            for queue in self.tree.chain(name):
                self.held[k][queue] = self.held[k].get(queue, 0.0) + gain

    def more_gpus(self, job: JobView) -> float:
        """The most GPUs the job's queue lets it add to what it holds, in the pool that
        allows the most (`inf` in none: every queue's limits and shares are pools of
        its own; 0 for a job of no queue)."""
        name = self.leaf.get(job.job_id)
        if name is None:
            return 0.0
        best = 0.0
        for k, figures in enumerate(self.figures):
            if not figures.pool.accepts(job.spec):
                continue
            room = max(0.0, self.room[k][name])
            share = max(room + max(0.0, self.spare[k]), 2.0 * room - 2 * EPS_GPUS)
            cap = min(share, limit_room(self.tree, name, self.held[k], figures.pool))
            best = max(best, cap)
        return best


def plan_quota_refusals(
    room: QuotaRoom,
    job_of: Callable[[str], JobView | None],
    current: Mapping[str, Allocation],
    run: Mapping[str, Allocation],
) -> dict[str, Reason]:
    """The jobs a whole plan `run` gives GPUs beyond what they hold that their queue
    does not allow, each with its reason: the gains counted in submission order
    after what the plan releases of each leaf (a policy may swap one of a queue's
    jobs for another). `job_of`: the active job of an id (`Snapshot.job`)."""
    use = room.start(current, run)
    gains = []
    for job_id, alloc in run.items():
        job = job_of(job_id)
        if job is not None and use.gains(job, alloc):
            gains.append(job)
    refused: dict[str, Reason] = {}
    for job in sorted(gains, key=lambda j: (j.spec.submit_s, j.job_id)):
        alloc = run[job.job_id]
        why = use.refusal(job, alloc)
        if why is None:
            use.grant(job, alloc)
        else:
            refused[job.job_id] = why
    return refused
