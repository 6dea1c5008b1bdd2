"""Every registered policy against the shared invariants, in single rounds and in
whole replays with every plan checked."""

from __future__ import annotations

import pytest

from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from policies.registry import make_policy, policy_names
from tests.builders import make_cluster
from tests.policies.invariants import (
    check_filtered_round,
    check_round,
    constrained_snapshot,
    quota_round,
    random_snapshot,
    random_tree,
    two_types,
)


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(40))
def test_round_invariants(name: str, seed: int) -> None:
    check_round(make_policy(name), random_snapshot(seed))


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(8))
def test_round_invariants_on_two_gpu_types(name: str, seed: int) -> None:
    check_round(make_policy(name), random_snapshot(seed, heterogeneous=True))


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(16))
def test_round_plans_pass_the_filter_on_cordoned_and_cpu_short_nodes(name: str, seed: int) -> None:
    check_filtered_round(make_policy(name), constrained_snapshot(seed))


@pytest.mark.parametrize("name", policy_names())
@pytest.mark.parametrize("seed", range(16))
def test_round_plans_pass_the_filter_under_quota_limits(name: str, seed: int) -> None:
    """Plain quotas, and quotas per GPU model on two GPU types for every other seed."""
    snapshot = random_snapshot(seed, heterogeneous=seed % 2 == 1)
    quota_round(make_policy(name), snapshot, random_tree(seed, snapshot.cluster))


# Whole replays run every registered policy; Pollux's genetic search is shortened so
# that its replay of days of rigid jobs stays quick (the search itself is tested in
# test_pollux.py).
REPLAY_OPTIONS: dict[str, dict[str, object]] = {"pollux": {"generations": 20, "population": 40}}


@pytest.mark.parametrize("name", policy_names())
def test_replay_keeps_invariants_and_finishes_every_job(name: str) -> None:
    from controller.traces.formats.synthetic import generate

    cluster = make_cluster(nodes=4, gpus=4, racks=2)
    jobs = generate(150, seed=7, cluster_gpus=cluster.num_gpus, load=1.5)
    sim = Simulator(
        cluster,
        jobs,
        make_policy(name, **REPLAY_OPTIONS.get(name, {})),
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, check_plans=True),
    )
    result = sim.run()
    assert len(result.jobs) == 150
    assert all(o.finish_s is not None for o in result.jobs)
    # GPU-seconds held never exceed the capacity, and busy never exceeds held.
    assert result.gpu_s_allocated <= result.gpu_s_capacity + 1e-6
    assert result.gpu_s_busy <= result.gpu_s_allocated + 1e-6
    assert max(s.gpus_allocated for s in result.timeline) <= cluster.num_gpus + 1e-9


@pytest.mark.parametrize("name", ["tiresias", "gandiva", "optimus", "pollux"])
def test_replay_on_two_gpu_types_keeps_invariants(name: str) -> None:
    """The policies that choose a GPU type, over a replay with every plan checked."""
    from controller.traces.formats.synthetic import generate

    cluster = two_types(make_cluster(nodes=4, gpus=4, racks=2))
    jobs = generate(40, seed=7, cluster_gpus=cluster.num_gpus, load=1.5)
    sim = Simulator(
        cluster,
        jobs,
        make_policy(name, **REPLAY_OPTIONS.get(name, {})),
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, check_plans=True),
    )
    result = sim.run()
    assert all(o.finish_s is not None for o in result.jobs)
    assert max(s.gpus_allocated for s in result.timeline) <= cluster.num_gpus + 1e-9
