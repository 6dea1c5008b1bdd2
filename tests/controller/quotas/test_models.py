"""Quotas per GPU model (controller.quotas with a per-model tree): each model's GPUs are
divided, lent and reclaimed on their own, on a cluster of one A100 and one V100 node."""

from __future__ import annotations

from dataclasses import replace

from controller.checks import check_plan
from controller.model import Allocation, Cluster, JobStatus, JobView, Plan, Snapshot
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.placement import ConsolidatedPlacer
from controller.quotas.admission import Quotas
from policies.registry import make_policy
from tests.builders import TEST_GPU, make_cluster, make_job, make_view

NOW_S = 1000.0
A100 = replace(TEST_GPU, name="A100")
V100 = replace(TEST_GPU, name="V100")


def cluster() -> Cluster:
    base = make_cluster(nodes=2, gpus=4)
    nodes = (replace(base.nodes[0], gpu_type=A100), replace(base.nodes[1], gpu_type=V100))
    return replace(base, nodes=nodes)


CLUSTER = cluster()
# a is guaranteed the A100 node, b the V100 node.
TREE = QuotaTree(
    (
        QuotaNode("a", GpuQuota.of({"A100": 4})),
        QuotaNode("b", GpuQuota.of({"V100": 4})),
    )
)


def running(job_id: str, tenant: str, node: int, gpus: int, attained_gpu_s: float = 0.0) -> JobView:
    spec = make_job(job_id, gpus, tenant=tenant, duration_s=10_000.0)
    alloc = Allocation.whole([(node, g) for g in range(gpus)])
    return make_view(
        spec, status=JobStatus.RUNNING, allocation=alloc, now_s=NOW_S, attained_gpu_s=attained_gpu_s
    )


def waiting(job_id: str, tenant: str, gpus: int, models: frozenset[str] = frozenset()) -> JobView:
    spec = replace(make_job(job_id, gpus, tenant=tenant, duration_s=10_000.0), gpu_models=models)
    return make_view(spec, now_s=NOW_S)


def decide(*jobs: JobView) -> tuple[Plan, dict[str, str]]:
    snap = Snapshot(NOW_S, CLUSTER, jobs, ConsolidatedPlacer(CLUSTER))
    quotas = Quotas(TREE)
    adm = quotas.admit(snap)
    plan = make_policy("fifo").schedule(adm.seen, None)
    plan = check_plan(snap, plan, policy="fifo", strict=True, quota=adm.seen.quota_room)
    plan = quotas.settle(adm, plan)
    fate = {}
    for job in jobs:
        reason = plan.reason_for(job.job_id)
        fate[job.job_id] = "RUN" if job.job_id in plan.run else (reason.code if reason else "?")
    return plan, fate


def test_v100s_lent_to_a_come_back_to_b_and_a_keeps_its_a100s() -> None:
    _, fate = decide(
        running("a-on-a100", "a", 0, 4),
        running("a-on-v100", "a", 1, 4),
        waiting("b1", "b", 4),
    )
    assert fate == {"a-on-a100": "RUN", "a-on-v100": "Reclaimed", "b1": "ReclaimPending"}


def test_a_job_held_to_a_full_model_waits_naming_it_while_another_lends() -> None:
    plan, fate = decide(
        running("a1", "a", 0, 4),
        waiting("a-needs-a100", "a", 2, frozenset({"A100"})),
        waiting("a-any", "a", 2),
    )
    # The A100 pool is a's and full; the idle V100s are lent to a's other job.
    assert fate == {"a1": "RUN", "a-needs-a100": "QueueOverShare", "a-any": "RUN"}
    assert "A100 GPUs" in plan.reasons["a-needs-a100"].message
    assert {s.node for s in plan.run["a-any"].shares} == {1}


def test_nothing_is_reclaimed_across_models() -> None:
    # b is owed V100s, but a holds only A100s (its own): nothing to take.
    _, fate = decide(
        running("a1", "a", 0, 4),
        running("b1", "b", 1, 4),
        waiting("b2", "b", 2, frozenset({"V100"})),
    )
    assert fate == {"a1": "RUN", "b1": "RUN", "b2": "QueueOverShare"}
