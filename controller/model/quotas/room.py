"""The quota half of the GPU-choice filter: how many more GPUs a job's quota allows.

controller.quotas.admission computes each round's figures before the policy (per
pool: the GPUs each quota holds and deserves, and the spare GPUs no quota is owed)
and hands them to the policy on its snapshot (`Snapshot.quota_room`, a `QuotaRoom`).
A policy asks `QuotaRoom.start(snapshot.current)` for one plan's `QuotaUse` (through
controller.model.gpu_choice.candidates.GpuFilter) and, job by job, `refusal` (why an
allocation does not pass the quota), `grant` (the allocation taken: the leaf's
headroom falls for the next job) and `release` (a job stopped or shrunk).
After the policy controller.checks checks the whole plan with the same rule
(`plan_quota_refusals`, through controller.model.gpu_choice.candidates.plan_refusals).

The rule, one for admission, the check and the policies: a leaf L may take g more
GPUs in a pool if no limit on its chain is passed (`at_limit`), and either g is
within its share (`within_share` of its headroom deserved(L) - held(L), plus what
the plan released of L's own jobs), or the part beyond its headroom fits the spare
GPUs (borrowing). What the plan released of L's jobs is no longer held by L's chain
when the limits are counted, so a quota at its limit may swap one of its jobs for
another. With quotas per GPU model, each pool (`Pool`: one model's GPUs)
is counted apart, a job in each pool it holds GPUs of.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.model.allocation import Allocation
from controller.model.job import JobSpec, JobView, Reason
from controller.model.quotas import ANY_MODEL, GpuQuota, QuotaTree

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
    tree: QuotaTree, leaf: str, held: Mapping[str, float], gpus: float, pool: Pool = ANY_POOL
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
                f"quota {queue} holds {held.get(queue, 0.0):g} of its limit of "
                f"{limit:g}{pool.label()} GPUs",
            )
    return None


def no_queue(job: JobView) -> Reason:
    named = f" and quota {job.spec.queue!r} is no leaf quota" if job.spec.queue else ""
    return Reason("NoQueue", f"no quota takes tenant {job.spec.tenant!r}{named}")


def over_share(tree: QuotaTree, figures: PoolFigures, leaf: str) -> Reason:
    node = tree.node(leaf)
    assert node is not None
    label = figures.pool.label()
    return Reason(
        "QueueOverShare",
        f"quota {leaf} holds {figures.held.get(leaf, 0.0):g}{label} GPUs, its share now "
        f"{figures.deserved.get(leaf, 0.0):.1f} "
        f"(guarantee {figures.pool.amount(node.guarantee):g}); no idle GPUs to lend",
    )


@dataclass(frozen=True)
class QuotaRoom:
    """The round's quota figures, as a policy is shown them (`Snapshot.quota_room`)."""

    tree: QuotaTree
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
    """What one plan has taken of the round's quota figures (module docstring).

    The rule is applied in submission order, as the check after the policy applies it
    to the whole plan (a gang that passes its leaf's share by less than it was short
    counts as the leaf's own, so the order matters): `refusal` asks whether the GPUs
    granted so far and the new ones, taken in that order after every release so far,
    all pass. So a plan built of what `refusal` allowed passes the check, whatever
    order the policy chose in."""

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
        # GPUs each leaf may use again in each pool: what the plan released of its jobs.
        self.credit: list[dict[str, float]] = [{} for _ in room.pools]
        self.granted: dict[str, tuple[JobView, Allocation]] = {}
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
                self.credit[k][name] = self.credit[k].get(name, 0.0) - change

    def keep(self, job_id: str) -> bool:
        """Take back a stop (`release(job_id, None)`): the job keeps what it holds, its
        GPUs no longer its leaf's to use again. False, and the stop stands, when what
        was granted since needs them."""
        name = self.leaf.get(job_id)
        before = self.current.get(job_id)
        if name is None or before is None:
            return True
        amounts = [f.pool.gpus(before) for f in self.figures]
        for credit, amount in zip(self.credit, amounts, strict=True):
            credit[name] = credit.get(name, 0.0) - amount
        if not self.evaluate(self.granted.values()):
            return True
        for credit, amount in zip(self.credit, amounts, strict=True):
            credit[name] += amount
        return False

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
        """Why the job's queue does not allow `alloc` (its GPUs beyond those it holds)
        next to what was granted so far, or None."""
        if not self.gains(job, alloc):
            return None
        entries = dict(self.granted)
        entries[job.job_id] = (job, alloc)
        refused = self.evaluate(entries.values())
        if not refused:
            return None
        return refused.get(job.job_id) or next(iter(refused.values()))

    def grant(self, job: JobView, alloc: Allocation) -> None:
        """Record `alloc` given to the job (allowed by `refusal`)."""
        if self.gains(job, alloc):
            self.granted[job.job_id] = (job, alloc)
        else:
            self.granted.pop(job.job_id, None)

    def evaluate(self, entries: Iterable[tuple[JobView, Allocation]]) -> dict[str, Reason]:
        """The jobs among `entries` that their queues refuse, each with its reason:
        the gains taken in submission order after the releases, each allowed one
        lowering its leaf's headroom (then the spare GPUs) and raising its chain's
        holdings, a refused one taking nothing."""
        tree = self.tree
        room = [
            {q.name: f.headroom(q.name) + c.get(q.name, 0.0) for q in tree.leaves()}
            for f, c in zip(self.figures, self.credit, strict=True)
        ]
        spare = [f.spare_gpus for f in self.figures]
        held = [dict(f.held) for f in self.figures]
        for k, credit in enumerate(self.credit):  # released: no longer held
            for leaf, gpus in credit.items():
                for queue in tree.chain(leaf):
                    held[k][queue] = held[k].get(queue, 0.0) - gpus
        refused: dict[str, Reason] = {}
        for job, alloc in sorted(entries, key=lambda e: (e[0].spec.submit_s, e[0].job_id)):
            gains = self.gains(job, alloc)
            if not gains:
                continue
            name = self.leaf.get(job.job_id)
            if name is None:
                refused[job.job_id] = no_queue(job)
                continue
            why: Reason | None = None
            owns: list[float] = []
            for k, gain in gains:
                figures = self.figures[k]
                why = at_limit(tree, name, held[k], gain, figures.pool)
                r = room[k][name]
                own = gain if within_share(r, gain) else max(0.0, min(r, gain))
                if why is None and gain - own > spare[k] + EPS_GPUS:
                    why = over_share(tree, figures, name)
                if why is not None:
                    break
                owns.append(own)
            if why is not None:
                refused[job.job_id] = why
                continue
            for (k, gain), own in zip(gains, owns, strict=True):
                room[k][name] -= own
                spare[k] -= max(0.0, gain - own)
                for queue in tree.chain(name):
                    held[k][queue] = held[k].get(queue, 0.0) + gain
        return refused


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
    entries = []
    for job_id, alloc in run.items():
        job = job_of(job_id)
        if job is not None and alloc is not current.get(job_id):
            entries.append((job, alloc))
    return use.evaluate(entries)
