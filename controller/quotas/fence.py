"""After the policy: its plan held to the quotas.

Called by controller.quotas.admission.Quotas.settle with the round's figures
(controller.quotas.admitted), before reclaim. Two steps, each only giving GPUs back
to the jobs that held them, so a valid plan stays valid:

- `fence_growth`: the plan's starts and growths, in submission order, must be within
  the leaf's share (controller.quotas.admitted.within_share, counting what the plan
  stops or shrinks of the same leaf: a policy may swap one of a queue's jobs for
  another), else come from the spare GPUs, and keep every limit; any other start
  stays waiting, any other growth is undone. Per pool, when quotas name GPU models.
- `protect`: a running job the policy stopped is given back its GPUs when its leaf
  would end the round below its share, since quotas, not the policy's order, decide
  between queues: Tiresias' least-attained-service, say, would otherwise preempt a
  team within its guarantee for another team's newer jobs. The jobs the policy
  started on those GPUs wait instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.model import Allocation, JobView, Reason
from controller.model.quotas import QueueTree
from controller.quotas.admitted import Admitted, at_limit, no_queue, over_share, within_share
from controller.quotas.shares import EPS_GPUS


def fence_growth(
    tree: QueueTree, adm: Admitted, run: dict[str, Allocation], reasons: dict[str, Reason]
) -> None:
    """Refuse, in place, every start or growth in `adm`'s pool that a quota forbids: a
    waiting job stays waiting; a running job keeps its GPUs, or stops if the plan
    gave them to another job."""
    snapshot = adm.snapshot
    pool = adm.pool
    current = snapshot.current or {}
    gains: list[tuple[tuple[float, str], JobView, float]] = []
    room = {leaf.name: adm.headroom(leaf.name) for leaf in tree.leaves()}
    for job_id, before in current.items():
        change = pool.gpus(run.get(job_id)) - pool.gpus(before)
        name = adm.leaf.get(job_id)
        if change < 0 and name is not None:
            room[name] -= change  # released by the plan: the leaf may use it again
    for job_id, alloc in run.items():
        gain = pool.gpus(alloc) - pool.gpus(current.get(job_id))
        job = snapshot.job(job_id)
        if gain > EPS_GPUS and job is not None:
            gains.append(((job.spec.submit_s, job_id), job, gain))
    if not gains:
        return
    held = dict(adm.held)
    spare = adm.spare_gpus
    refused: dict[str, Reason] = {}
    for _, job, gain in sorted(gains, key=lambda g: g[0]):
        name = adm.leaf.get(job.job_id)
        if name is None:
            refused[job.job_id] = no_queue(job)
            continue
        limited = at_limit(tree, name, held, gain, pool)
        own = gain if within_share(room[name], gain) else max(0.0, min(room[name], gain))
        if limited is None and gain - own > spare + EPS_GPUS:
            limited = over_share(tree, adm, name)
        if limited is not None:
            refused[job.job_id] = limited
            continue
        room[name] -= own
        spare -= max(0.0, gain - own)
        for queue in tree.chain(name):
            held[queue] = held.get(queue, 0.0) + gain
    if refused:
        _undo(run, reasons, refused, current)


def _taken(run: Mapping[str, Allocation]) -> dict[tuple[int, int], set[str]]:
    """Each GPU of the plan -> the jobs given a share of it."""
    taken: dict[tuple[int, int], set[str]] = {}
    for job_id, alloc in run.items():
        for gpu in alloc.gpus():
            taken.setdefault(gpu, set()).add(job_id)
    return taken


def _undo(
    run: dict[str, Allocation],
    reasons: dict[str, Reason],
    refused: Mapping[str, Reason],
    current: Mapping[str, Allocation],
) -> None:
    """Refuse each job in `refused`: back to its current GPUs if no other job of the
    plan took one of them, else out of the plan (stopped, or left waiting)."""
    taken = _taken(run)
    for job_id in sorted(refused):
        before = current.get(job_id)
        if before is not None and all(taken.get(g, set()) <= {job_id} for g in before.gpus()):
            run[job_id] = before
            continue
        del run[job_id]
        reasons[job_id] = refused[job_id]


def protect(
    tree: QueueTree, adm: Admitted, run: dict[str, Allocation], reasons: dict[str, Reason]
) -> None:
    """Give back, in place, the GPUs of jobs the policy stopped in leaves that would
    end below their share; the jobs newly started on them wait instead."""
    snapshot = adm.snapshot
    current = snapshot.current or {}
    pool = adm.pool
    stopped = [
        j
        for j, alloc in current.items()
        if j not in run and adm.leaf.get(j) is not None and pool.gpus(alloc) > 0
    ]
    if not stopped:
        return
    held: dict[str, float] = {}
    for job_id, alloc in run.items():
        name = adm.leaf.get(job_id)
        if name is not None:
            held[name] = held.get(name, 0.0) + pool.gpus(alloc)
    taken = _taken(run)
    for job_id in sorted(stopped, key=lambda j: (current[j].gpu_weight, j)):
        name = adm.leaf[job_id]
        assert name is not None
        before = current[job_id]
        share = adm.deserved.get(name, 0.0)
        if held.get(name, 0.0) >= share - EPS_GPUS:
            continue  # the leaf keeps its share without this job: the policy's choice
        takers = {t for g in before.gpus() for t in taken.get(g, set())}
        if any(t in current or adm.leaf.get(t) == name for t in takers):
            continue  # a running job moved there, or the leaf swapped its own jobs
        for taker in takers:
            for gpu in run[taker].gpus():
                taken[gpu].discard(taker)
            other = adm.leaf.get(taker)
            if other is not None:
                held[other] = held.get(other, 0.0) - pool.gpus(run[taker])
            del run[taker]
            reasons[taker] = Reason(
                "ShareProtected",
                f"the GPUs it was given hold queue {name}'s job {job_id}, within its share",
            )
        run[job_id] = before
        for gpu in before.gpus():
            taken.setdefault(gpu, set()).add(job_id)
        held[name] = held.get(name, 0.0) + pool.gpus(before)
        reasons.pop(job_id, None)
