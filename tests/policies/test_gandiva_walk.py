"""Gandiva reads its queue from the head and stops (`policies.gandiva.queue`): the same
plans as the round that read every waiting job (`tests/policies/gandiva_reference.py`),
and a true reason for every job left waiting.

Compared on random snapshots (no ordered index: the queue sorted once a round) and on
every round of overloaded replays (the simulator's ordered index, read lazily), with
packing, elastic jobs, jobs with utilisations of their own, and a `pack_util_max` at
which the catalogue's floor is not used.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from controller.model import JobView, Plan, Snapshot
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from policies.gandiva import Gandiva, GandivaState
from policies.gandiva.packing import _floor_is_safe
from policies.gandiva.queue import Kind, gandiva_key
from tests.builders import make_cluster, make_job
from tests.policies.gandiva_reference import reference_round
from tests.policies.invariants import random_snapshot


def _same_plan(snapshot: Snapshot, plan: Plan, ref: Plan) -> None:
    assert dict(plan.run) == dict(ref.run)
    assert plan.suspend == ref.suspend
    assert plan.wake_s == ref.wake_s
    assert isinstance(plan.state, GandivaState) and isinstance(ref.state, GandivaState)
    assert dict(plan.state.slice_start_s) == dict(ref.state.slice_start_s)
    assert plan.state.packs == ref.state.packs
    assert plan.state.banned_pairs == ref.state.banned_pairs
    _true_reasons(snapshot, plan, ref)


def _true_reasons(snapshot: Snapshot, plan: Plan, ref: Plan) -> None:
    """Every job left waiting has a reason: its own, the one the reference gives it, or
    the shared one naming a job ahead of it that has its own."""
    left = sorted((j for j in snapshot.waiting() if j.job_id not in plan.run), key=gandiva_key)
    for job in left:
        own = plan.reasons.get(job.job_id)
        if own is not None:
            assert own == ref.reasons[job.job_id]
            continue
        shared = plan.default_reason
        assert shared is not None and shared.code == "QueuedBehind"
        head = left[0]
        assert f"job {head.job_id} " in shared.message
        assert head.job_id in plan.reasons and gandiva_key(head) < gandiva_key(job)
        sharing = sum(1 for j in left if j.job_id not in plan.reasons)
        assert shared.message.endswith(f"and {sharing} more behind")
    waiting = {j.job_id for j in snapshot.waiting()}
    for job_id, reason in ref.reasons.items():  # suspended and unpacked jobs
        if job_id not in waiting:
            assert plan.reasons[job_id] == reason


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("util_max", [1.0, 0.9])
def test_random_rounds_match_the_full_scan(seed: int, util_max: float) -> None:
    snap = random_snapshot(seed)
    policy = Gandiva(pack_util_max=util_max)
    for state in (None, GandivaState({j.job_id: 0.0 for j in snap.running()})):
        _same_plan(snap, policy.schedule(snap, state), reference_round(policy, snap, state))


@dataclass(frozen=True)
class Checked:
    """Gandiva that checks each round's plan against the full scan's."""

    policy: Gandiva
    name: str = "gandiva"

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        ref = reference_round(self.policy, snapshot, state)
        plan = self.policy.schedule(snapshot, state)
        _same_plan(snapshot, plan, ref)
        # The kinds kept from the change log are those of every waiting job.
        assert isinstance(plan.state, GandivaState) and plan.state.kinds is not None
        kept = {n: counts for n, counts in plan.state.kinds.by_size.items() if counts}
        assert kept == _kinds(snapshot.waiting())
        return plan


def _kinds(jobs: Iterable[JobView]) -> dict[int, dict[Kind, int]]:
    out: dict[int, dict[Kind, int]] = {}
    for job in jobs:
        spec = job.spec
        counts = out.setdefault(spec.num_gpus, {})
        kind = (spec.model, spec.gpu_mem_mib, spec.elastic, spec.gpu_util)
        counts[kind] = counts.get(kind, 0) + 1
    return out


@pytest.mark.parametrize(
    ("seed", "own_utils"), [(1, False), (2, False), (3, False), (1, True), (2, True)]
)
@pytest.mark.parametrize("util_max", [1.0, 0.9])
def test_every_round_of_a_replay_matches_the_full_scan(
    seed: int, util_max: float, own_utils: bool
) -> None:
    """`own_utils`: a third of the jobs carry their own utilisation (as a trace or a
    measurement gives it), so the waiting kinds differ by it and the catalogue's floor
    no longer holds."""
    cluster = make_cluster(nodes=3, gpus=4, racks=2)
    rng = random.Random(seed)
    utils = random.Random(-seed)
    jobs = []
    for i in range(150):  # 150 jobs within two hours: queues of dozens
        size = rng.choice([1, 1, 1, 2, 4, 8])
        elastic = rng.random() < 0.15
        jobs.append(
            make_job(
                f"j{i:03d}",
                size,
                submit_s=rng.uniform(0, 7200),
                duration_s=rng.uniform(300, 20000),
                model=rng.choice(["ncf", "a3c", "cifar10", "resnet50", "bert"]),
                min_gpus=1 if elastic else 0,
                max_gpus=min(2 * size, 8) if elastic else 0,
                gpu_mem_mib=rng.choice([None, None, 4096]),
                gpu_util=utils.choice([0.06, 0.25, 0.5])
                if own_utils and utils.random() < 0.33
                else None,
            )
        )
    config = SimConfig(round_interval_s=60.0, check_plans=True)
    policy = Checked(Gandiva(pack_util_max=util_max))
    result = Simulator(cluster, jobs, policy, ConsolidatedPlacer(cluster), config).run()
    assert max(s.queued for s in result.timeline) >= 30  # a queue did form


def test_the_catalogue_floor_is_used_where_it_is_exact() -> None:
    assert _floor_is_safe(1.0)
    assert not _floor_is_safe(0.9)  # by rounding: the full scan's floor instead
