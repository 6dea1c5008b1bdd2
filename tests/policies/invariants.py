"""The invariant suite every policy runs (tests/policies/test_invariants.py).

Random snapshots — running gangs already placed, queued and preempted jobs waiting —
on clusters of 1..16 nodes, in the spirit of AdaptDL's pollux_test.py: a plan must
never over-allocate a GPU, must place every gang whole within its size limits, must
give every waiting job a reason, and must be the same for the same input. The same
on clusters of two GPU types, where the policies that choose a type do (issue 31).
And on constrained snapshots (`constrained_snapshot`: cordoned nodes, nodes short of
CPU or memory for the jobs' pods, jobs that accept one GPU model), every plan must
pass the controller's check against the GPU-choice filter (controller.checks), as
it must under quota limits (`quota_round`): where GPUs are chosen, not repaired after.
"""

from __future__ import annotations

import random
from dataclasses import replace

from controller.checks import check_plan
from controller.model import (
    Cluster,
    GpuPool,
    JobStatus,
    JobView,
    Plan,
    Policy,
    Snapshot,
    validate_plan,
)
from controller.model.order import queue_order
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.placement import ConsolidatedPlacer, make_placer
from controller.quotas.admission import Quotas
from tests.builders import TEST_GPU, make_cluster, make_job, make_view

MODELS = ("resnet50", "vgg16", "bert", "gpt2", "cifar10", "ncf")


# The second GPU type of a heterogeneous snapshot: every other node, 2.5x as fast.
FAST_GPU = replace(TEST_GPU, name="FAST-16GB", speed=2.5)


def two_types(cluster: Cluster) -> Cluster:
    """The cluster with every other node (1, 3, ...) of `FAST_GPU`."""
    nodes = tuple(
        replace(n, gpu_type=FAST_GPU) if i % 2 else n for i, n in enumerate(cluster.nodes)
    )
    return Cluster(f"{cluster.name}-two-types", nodes, cluster.racks, cluster.groups)


def random_snapshot(seed: int, heterogeneous: bool = False) -> Snapshot:
    """A random snapshot; `heterogeneous`: on nodes of two GPU types (`two_types`)."""
    rng = random.Random(seed)
    # A job's own utilisation (a trace's, or measured live) on about a third of the
    # jobs, drawn apart so that the rest of each snapshot stays as it was.
    own_util = random.Random(-1 - seed)
    nodes = rng.choice([1, 2, 3, 4, 8, 16])
    gpus = rng.choice([2, 4, 8])
    cluster = make_cluster(nodes=nodes, gpus=gpus, racks=1 if nodes < 4 else 2)
    if heterogeneous:
        cluster = two_types(cluster)
    placer = ConsolidatedPlacer(cluster)
    pool = GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))
    now = 1000.0
    views: list[JobView] = []
    for i in range(rng.randint(1, 3 * nodes * gpus)):
        size = min(rng.choice([1, 1, 1, 2, 2, 4, 8, 16]), cluster.num_gpus)
        elastic = rng.random() < 0.3
        spec = make_job(
            f"j{i:03d}",
            size,
            submit_s=rng.uniform(0, now),
            duration_s=rng.uniform(60, 20000),
            model=rng.choice(MODELS),
            tenant=rng.choice(["a", "b", "c"]),
            min_gpus=1 if elastic else 0,
            max_gpus=max(size, min(2 * size, cluster.num_gpus)) if elastic else 0,
            gpu_mem_mib=rng.choice([None, 4096, 8192]),
            gpu_util=own_util.choice([0.06, 0.2, 0.45, 0.7]) if own_util.random() < 0.3 else None,
        )
        state = rng.choice([JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.PREEMPTED])
        total = spec.duration_s or 1.0
        done = rng.uniform(0, 0.9) * total if state is not JobStatus.QUEUED else 0.0
        alloc = None
        if state is JobStatus.RUNNING:
            probe = make_view(spec)
            alloc = placer.place(pool, probe, size)
            if alloc is None:
                state = JobStatus.PREEMPTED
            else:
                pool.take(alloc, spec.gpu_mem_mib)
        views.append(
            make_view(
                spec,
                status=state,
                allocation=alloc,
                now_s=now,
                done_iters=done,
                total_iters=total,
                attained_gpu_s=done * size,
                executed_s=done,
                waiting_since_s=rng.uniform(spec.submit_s, now),
            )
        )
    return Snapshot(now_s=now, cluster=cluster, jobs=tuple(views), placer=placer)


def check_round(policy: Policy, snapshot: Snapshot, state: object = None) -> Plan:
    """One round under the invariants; returns the plan for further checks."""
    plan = policy.schedule(snapshot, state)
    validate_plan(snapshot, plan)  # over-allocation, gangs, sizes, reasons
    again = policy.schedule(snapshot, state)
    assert dict(again.run) == dict(plan.run), "same snapshot, different plan"
    assert again.reasons == plan.reasons
    return plan


def constrained_snapshot(seed: int) -> Snapshot:
    """`random_snapshot(seed)` (of two GPU types for every other seed) where every
    node states its CPU and memory (some too little for the pods that ask the most),
    a third of the nodes (where there are two or more) are cordoned, about half the
    jobs' pods ask CPU and memory, and a fifth of the waiting jobs accept one GPU
    model; placed by the wrapped consolidated placer, as a backend places. A running
    job whose pod no longer fits its nodes waits preempted instead."""
    rng = random.Random(10_000 + seed)
    base = random_snapshot(seed, heterogeneous=seed % 2 == 1)
    cluster = base.cluster
    nodes = tuple(
        replace(
            n,
            cpu_milli=rng.choice([6000, 16000, 64000]),
            host_mem_mib=rng.choice([24576, 262144]),
        )
        for n in cluster.nodes
    )
    cluster = Cluster(cluster.name, nodes, cluster.racks, cluster.groups)
    models = sorted({n.gpu_type.name for n in nodes})
    pool = GpuPool.of_cluster(cluster)
    views: list[JobView] = []
    for view in base.jobs:
        spec = view.spec
        if rng.random() < 0.5:
            spec = replace(
                spec,
                cpu_milli=rng.choice([1000, 4000, 8000]),
                host_mem_mib=rng.choice([4096, 16384]),
            )
        if view.allocation is None and rng.random() < 0.2:
            spec = replace(spec, gpu_models=frozenset({rng.choice(models)}))
        alloc, status = view.allocation, view.status
        if alloc is not None:
            alloc = alloc.with_host(spec.host)
            if pool.fits(alloc, spec.gpu_mem_mib):
                pool.take(alloc, spec.gpu_mem_mib)
            else:
                alloc, status = None, JobStatus.PREEMPTED
        views.append(replace(view, spec=spec, allocation=alloc, status=status))
    count = len(nodes) // 3
    cordoned = frozenset(rng.sample(range(len(nodes)), count))
    placer = make_placer("consolidated", cluster)
    return Snapshot(base.now_s, cluster, tuple(views), placer, cordoned_nodes=cordoned)


def check_filtered_round(policy: Policy, snapshot: Snapshot) -> Plan:
    """`check_round`, and the plan passes the check against the GPU-choice filter
    (PlanError names the first job given GPUs the filter refuses)."""
    plan = check_round(policy, snapshot)
    check_plan(snapshot, plan, policy=policy.name, strict=True)
    return plan


def random_tree(seed: int, cluster: Cluster) -> QuotaTree:
    """Queues for the tenants of `random_snapshot` (a, b, c): guarantees that add up to
    at most the cluster's GPUs, and a limit on about half of them, from a guarantee up
    to the cluster's GPUs; per GPU model on a cluster of two types."""
    rng = random.Random(20_000 + seed)
    capacity: dict[str, int] = {}
    for node in cluster.nodes:
        capacity[node.gpu_type.name] = capacity.get(node.gpu_type.name, 0) + node.num_gpus
    left = dict(capacity)
    leaves = []
    for name in ("a", "b", "c"):
        guarantee, limit = {}, {}
        for model, gpus in sorted(capacity.items()):
            guarantee[model] = rng.randint(0, max(0, left[model] // 2))
            left[model] -= guarantee[model]
            limit[model] = rng.randint(guarantee[model], gpus)
        limited = rng.random() < 0.5
        if len(capacity) == 1:  # plain numbers of GPUs
            (g,), (m,) = guarantee.values(), limit.values()
            leaves.append(_leaf(name, GpuQuota.of(g), GpuQuota.of(m) if limited else None, rng))
        else:
            leaves.append(
                _leaf(name, GpuQuota.of(guarantee), GpuQuota.of(limit) if limited else None, rng)
            )
    return QuotaTree(tuple(leaves))


def _leaf(name: str, guarantee: GpuQuota, limit: GpuQuota | None, rng: random.Random) -> QuotaNode:
    return QuotaNode(name, guarantee=guarantee, limit=limit, weight=rng.choice([1.0, 2.0]))


def quota_round(policy: Policy, snapshot: Snapshot, tree: QuotaTree) -> Plan:
    """One round as the controller runs it with quotas (admission, the policy on the
    snapshot it is shown, then the check against the filter, quotas included):
    PlanError names the first job given GPUs its queue does not allow."""
    quotas = Quotas(tree)
    admitted = quotas.admit(snapshot, queue_order(policy, snapshot, None))
    plan = policy.schedule(admitted.seen, None)
    validate_plan(admitted.seen, plan)
    room = admitted.seen.quota_room
    return check_plan(snapshot, plan, policy=policy.name, strict=True, quota=room)
