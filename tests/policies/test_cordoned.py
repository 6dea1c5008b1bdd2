"""Every policy plans beside a cordoned node, not on it (issue 25: Pollux and Optimus
planned on the cordoned node, the fence refused the start, and the jobs waited
NodeCordoned, or Fragmented, while the other node's GPUs were idle)."""

from __future__ import annotations

import pytest

from controller.checks import check_plan
from controller.model import GpuPool, Snapshot, validate_plan
from controller.placement import ConsolidatedPlacer
from policies.registry import make_policy, policy_names
from tests.builders import make_cluster, make_job, make_view


@pytest.mark.parametrize("cordoned", [0, 1])
@pytest.mark.parametrize("policy", policy_names())
def test_jobs_go_to_the_node_that_is_not_cordoned(policy: str, cordoned: int) -> None:
    """Two empty 4-GPU nodes, one cordoned; a rigid 2-GPU job and an elastic one asking
    2 (1..8) both fit the other node. Before, Pollux put both on node 0 when it was the
    cordoned one (both refused), and Optimus sized the elastic job from all 8 GPUs,
    leaving the rigid one Fragmented."""
    cluster = make_cluster(nodes=2, gpus=4)
    jobs = (
        make_view(make_job("rigid", 2, duration_s=600.0), now_s=10.0),
        make_view(
            make_job("el", 2, min_gpus=1, max_gpus=8, duration_s=600.0, submit_s=1.0),
            now_s=10.0,
        ),
    )
    pool = GpuPool.of_cluster(cluster, frozenset(), frozenset({cordoned}))
    snapshot = Snapshot(
        10.0, cluster, jobs, ConsolidatedPlacer(cluster), cordoned_nodes=frozenset({cordoned}),
        pool=pool,
    )  # fmt: skip
    made = make_policy(policy)
    plan = check_plan(snapshot, made.schedule(snapshot, None), policy=made.name, strict=True)
    validate_plan(snapshot, plan)
    for job in ("rigid", "el"):
        assert job in plan.run, plan.reasons.get(job) or plan.default_reason
        assert plan.run[job].nodes == (1 - cordoned,)
