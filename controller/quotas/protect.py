"""After the policy: quotas deciding between queues, a decision and not a repair.

Called by controller.quotas.admission.Quotas.settle with the round's figures
(controller.quotas.admitted), before reclaim. `protect`: a running job the policy
stopped is given back its GPUs when its leaf would end the round below its share,
since quotas, not the policy's order, decide between queues: Tiresias'
least-attained-service, say, would otherwise preempt a team within its guarantee
for another team's newer jobs. The jobs the policy started on those GPUs wait
instead (`ShareProtected`). Only GPUs go back to the jobs that held them, so a valid
plan stays valid.

What a policy may start or grow within the quotas is no longer fenced here: the
policies ask the GPU-choice filter's quota half (controller.model.quotas.room) where
they choose GPUs, and controller.checks checks the plan against it.
"""

from __future__ import annotations

from controller.model import Allocation, Reason
from controller.model.gpu_choice.candidates import gpu_takers
from controller.model.quotas import QuotaTree
from controller.model.quotas.room import EPS_GPUS
from controller.quotas.admitted import Admitted


def protect(
    tree: QuotaTree, adm: Admitted, run: dict[str, Allocation], reasons: dict[str, Reason]
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
    taken = gpu_takers(run)
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
                f"the GPUs it was given hold quota {name}'s job {job_id}, within its share",
            )
        run[job_id] = before
        for gpu in before.gpus():
            taken.setdefault(gpu, set()).add(job_id)
        held[name] = held.get(name, 0.0) + pool.gpus(before)
        reasons.pop(job_id, None)
