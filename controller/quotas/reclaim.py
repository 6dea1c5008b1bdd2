"""Reclaim: borrowed GPUs preempted so that the jobs a queue is owed can start.

Called by controller.quotas.admission.Quotas.settle, last, with the round's figures
(controller.quotas.admitted) and the plan as controller.quotas.fence left it; the
rules are in controller.quotas.admission's docstring. It only takes running jobs
out of the plan, so a valid plan stays valid.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controller.model import Allocation, JobView, Reason
from controller.model.quotas import QuotaTree
from controller.model.quotas.room import EPS_GPUS, within_share
from controller.quotas.admitted import Admitted


def reclaim(
    tree: QuotaTree,
    adm: Admitted,
    run: Mapping[str, Allocation],
    owed_elsewhere: Collection[str] = (),
) -> tuple[dict[str, Reason], dict[str, Reason]]:
    """(victims, owed) in `adm`'s pool: the running jobs to preempt so that owed jobs
    fit, each with its reason, and the owed jobs with `ReclaimPending`; both empty
    when nothing needs, or may be, reclaimed. Jobs in `owed_elsewhere` (owed in
    another pool) are not claimed again."""
    snapshot = adm.snapshot
    pool = adm.pool
    held: dict[str, float] = {}
    for job_id, alloc in run.items():
        name = adm.leaf.get(job_id)
        if name is not None:
            for queue in tree.chain(name):
                held[queue] = held.get(queue, 0.0) + pool.gpus(alloc)
    if all(
        held.get(leaf.name, 0.0) >= adm.deserved.get(leaf.name, 0.0) - EPS_GPUS
        for leaf in tree.leaves()
    ):
        return {}, {}  # every queue has its share: nobody is owed anything
    claimed: dict[str, float] = {}
    owed: list[JobView] = []
    # Every job of a leaf left waiting is owed while it fits the leaf's share: those
    # the policy was not shown for want of headroom, and those the plan stops.
    for job in sorted(snapshot.jobs, key=lambda j: (j.spec.submit_s, j.job_id)):
        name = adm.leaf.get(job.job_id)
        if name is None or job.job_id in run or job.job_id in owed_elsewhere:
            continue
        if not pool.accepts(job.spec):
            continue
        room = adm.deserved.get(name, 0.0) - held.get(name, 0.0) - claimed.get(name, 0.0)
        if within_share(room, job.spec.min_gpus):
            claimed[name] = claimed.get(name, 0.0) + job.spec.min_gpus
            owed.append(job)
    if not owed:
        return {}, {}
    free = _free_after(adm, run)
    deficit = sum(claimed.values()) - free
    if deficit <= EPS_GPUS:
        return {}, {}
    protected = {q for name in claimed for q in tree.chain(name)}
    chosen = _victims(tree, adm, run, held, protected, deficit)
    freed = sum(pool.gpus(run[v.job_id]) for v in chosen)
    if not chosen or free + freed < min(j.spec.min_gpus for j in owed) - EPS_GPUS:
        return {}, {}  # nothing may go, or not enough to start any owed job
    claimants = ", ".join(sorted(claimed))
    victims: dict[str, Reason] = {}
    sources: set[str] = set()
    for victim in chosen:
        name = adm.leaf[victim.job_id]
        assert name is not None
        sources.add(name)
        victims[victim.job_id] = Reason(
            "Reclaimed",
            f"preempted to give back{pool.label()} GPUs to quota {claimants}: quota {name} "
            f"held {adm.held.get(name, 0.0):g}, over its share {adm.deserved[name]:.1f}",
        )
    owed_reasons: dict[str, Reason] = {}
    for job in owed:
        name = adm.leaf[job.job_id]
        assert name is not None
        owed_reasons[job.job_id] = Reason(
            "ReclaimPending",
            f"quota {name} is owed{pool.label()} GPUs of its share {adm.deserved[name]:.1f}: "
            f"{freed:g} being reclaimed from quota {', '.join(sorted(sources))}",
        )
    return victims, owed_reasons


def _free_after(adm: Admitted, run: Mapping[str, Allocation]) -> int:
    """Whole GPUs of the pool the plan leaves free on nodes that take work: free now
    (the backend's pool: a live cluster's terminating pods still hold theirs), plus
    those the plan releases, less those it takes."""
    snapshot = adm.snapshot
    closed = snapshot.down_nodes | snapshot.cordoned_nodes
    every = range(len(snapshot.cluster.nodes))
    nodes = [n for n in (every if adm.pool.nodes is None else adm.pool.nodes) if n not in closed]
    free_now = snapshot.free_pool()
    free = {(n, g) for n in nodes for g in free_now.free_gpus(n)}
    before = {g for alloc in (snapshot.current or {}).values() for g in alloc.gpus()}
    after = {g for alloc in run.values() for g in alloc.gpus()}
    opened = set(nodes)
    free |= {g for g in before - after if g[0] in opened}
    return len(free - after)


def _victims(
    tree: QuotaTree,
    adm: Admitted,
    run: Mapping[str, Allocation],
    held: dict[str, float],
    protected: set[str],
    deficit: float,
) -> list[JobView]:
    """Least loss first (controller.quotas.admission): running jobs whose queues stay
    at or above their share, and their leaf at or above its guarantee, without them."""
    snapshot = adm.snapshot
    pool = adm.pool
    now = snapshot.now_s
    current = snapshot.current or {}
    candidates: list[JobView] = []
    for job_id, alloc in run.items():
        name = adm.leaf.get(job_id)
        job = snapshot.job(job_id)
        mine = job_id in current and pool.gpus(alloc) > 0
        if job and mine and name is not None and name not in protected:
            candidates.append(job)
    chosen: list[JobView] = []

    def may_go(job: JobView) -> bool:
        name = adm.leaf[job.job_id]
        assert name is not None
        gpus = pool.gpus(run[job.job_id])
        node = tree.node(name)
        assert node is not None
        if held.get(name, 0.0) - gpus < pool.amount(node.guarantee) - EPS_GPUS:
            return False
        return all(
            held.get(q, 0.0) - gpus >= adm.deserved.get(q, 0.0) - EPS_GPUS
            for q in tree.chain(name)
            if q not in protected
        )

    while deficit > EPS_GPUS:
        eligible = [j for j in candidates if j not in chosen and may_go(j)]
        if not eligible:
            break

        def loss(job: JobView) -> tuple[float, float, str]:
            return (pool.gpus(run[job.job_id]), job.attained_gpu_s_at(now), job.job_id)

        covering = [j for j in eligible if pool.gpus(run[j.job_id]) >= deficit - EPS_GPUS]
        if covering:
            pick = min(covering, key=loss)
        else:
            pick = min(eligible, key=lambda j: (-loss(j)[0], loss(j)[1], j.job_id))
        chosen.append(pick)
        gpus = pool.gpus(run[pick.job_id])
        deficit -= gpus
        name = adm.leaf[pick.job_id]
        assert name is not None
        for queue in tree.chain(name):
            held[queue] = held.get(queue, 0.0) - gpus
    return chosen
