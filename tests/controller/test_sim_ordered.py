"""Replays read the queue from the simulator's ordered index; the same replays with the
index hidden from the policy (each round sorts `Snapshot.waiting()` from scratch)
must give the same result, job by job and round by round.

The trace overloads a small cluster so that queues of dozens form: long enough that
SRTF walks the ordered queue rather than sorting every job, and FIFO stops at a
blocked head with many jobs behind it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import pytest

from controller.model import Plan, Policy, Snapshot
from controller.placement import ConsolidatedPlacer
from controller.records import ReplayResult
from controller.sim import SimConfig, Simulator
from policies.registry import make_policy
from policies.tiresias import Tiresias
from tests.builders import make_cluster, make_job


@dataclass(frozen=True)
class Unordered:
    """`policy` on snapshots that carry no ordered index (the from-scratch path)."""

    policy: Policy

    @property
    def name(self) -> str:
        return self.policy.name

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        return self.policy.schedule(replace(snapshot, ordered=None), state)


def _replay(policy: Policy, seed: int) -> ReplayResult:
    cluster = make_cluster(nodes=2, gpus=4)
    rng = random.Random(seed)
    # 120 jobs within the first hour, each of minutes to hours on up to 8 GPUs.
    jobs = [
        make_job(
            f"j{i:03d}",
            rng.choice([1, 1, 1, 2, 4, 8]),
            submit_s=rng.uniform(0, 3600),
            duration_s=rng.uniform(300, 20000),
            model=rng.choice(["resnet50", "vgg16", "bert", "cifar10"]),
        )
        for i in range(120)
    ]
    config = SimConfig(round_interval_s=60.0, check_plans=True)
    return Simulator(cluster, jobs, policy, ConsolidatedPlacer(cluster), config).run()


@pytest.mark.parametrize("name", ["fifo", "srtf", "gandiva", "tiresias"])
@pytest.mark.parametrize("seed", [1, 2])
def test_replay_is_the_same_with_and_without_the_ordered_index(name: str, seed: int) -> None:
    ordered = _replay(make_policy(name), seed)
    scratch = _replay(Unordered(make_policy(name)), seed)
    assert max(s.queued for s in ordered.timeline) >= 60  # a queue did form
    assert ordered.jobs == scratch.jobs
    assert ordered.timeline == scratch.timeline
    assert ordered.rounds == scratch.rounds


@pytest.mark.parametrize(
    "policy",
    [
        Tiresias(starve_limit=0.5),
        Tiresias(starve_limit=2.0, service_samples_gpu_s=(600.0, 3000.0, 9000.0, 40_000.0)),
    ],
    ids=["promotions", "gittins"],
)
def test_tiresias_kept_ranking_replays_as_ranking_from_scratch(policy: Tiresias) -> None:
    """Tiresias keeps its waiting jobs ranked from the simulator's change log; without
    the index (no log) it ranks every waiting job each round: the same replay."""
    kept = _replay(policy, 3)
    scratch = _replay(Unordered(policy), 3)
    assert max(s.queued for s in kept.timeline) >= 60
    assert sum(o.preemptions for o in kept.jobs) > 0
    assert kept.jobs == scratch.jobs
    assert kept.timeline == scratch.timeline
