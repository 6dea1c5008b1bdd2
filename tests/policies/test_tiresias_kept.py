"""Tiresias' waiting and running jobs kept ranked between rounds
(policies.tiresias.waiting, policies.tiresias.running) and its records handed on
copy-on-write (policies.tiresias.ledger), against the ranking of every job from
scratch, round by round.

Each round of a replay is decided twice on the same snapshot: by the policy with the
state the previous round returned (its kept rankings brought up to date from the
simulator's change log and the crossings due) and from a copy of that state without
them (every job ranked afresh). Plans (`wake_s` to the last bit), the next state's
records, the kept rankings themselves, and the given state's records read after the
round took them, must agree. The replays overload a small cluster with long jobs, so that jobs
cross thresholds, are preempted, starve and are promoted; node failures stop jobs
outside any plan.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Plan, Snapshot
from controller.placement import ConsolidatedPlacer
from controller.sim import NodeEvent, SimConfig, Simulator
from policies.tiresias import Tiresias, TiresiasState
from tests.builders import make_cluster, make_job


@dataclass
class Compared:
    """Tiresias, each round also decided from scratch and compared."""

    policy: Tiresias
    name: str = "tiresias"
    rounds: int = 0
    kept_rounds: int = 0  # rounds whose state came with a kept ranking to bring along
    mismatches: list[str] = field(default_factory=list)

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        self.rounds += 1
        scratch_state = None
        if isinstance(state, TiresiasState):
            if state.kept is not None and state.kept.holder is state:
                self.kept_rounds += 1
            scratch_state = TiresiasState(state.entered, state.promotions)
        scratch = self.policy.schedule(snapshot, scratch_state)
        plan = self.policy.schedule(snapshot, state)
        self._compare(snapshot.now_s, plan, scratch)
        if scratch_state is not None and state != scratch_state:  # its records rebuilt
            self.mismatches.append(f"t={snapshot.now_s}: given state's records")
        return plan

    def _compare(self, now: float, plan: Plan, scratch: Plan) -> None:
        kept, fresh = plan.state, scratch.state
        assert isinstance(kept, TiresiasState) and isinstance(fresh, TiresiasState)
        assert kept.kept is not None and fresh.kept is not None
        checks = {
            "run": dict(plan.run) == dict(scratch.run),
            "reasons": plan.reasons == scratch.reasons,
            "default": plan.default_reason == scratch.default_reason,
            "wake": plan.wake_s == scratch.wake_s,
            "entered": dict(kept.entered) == dict(fresh.entered),
            "promotions": dict(kept.promotions) == dict(fresh.promotions),
            "ranked": kept.kept.ranked == fresh.kept.ranked,
            "queues": [list(b) for b in kept.kept.buckets] == [list(b) for b in fresh.kept.buckets],
            "starving": list(kept.kept.starving) == list(fresh.kept.starving),
            "running": _running(kept) == _running(fresh),
            "crossings": _crossings_agree(kept, fresh),
        }
        self.mismatches.extend(f"t={now}: {k}" for k, same in checks.items() if not same)


def _running(state: TiresiasState) -> list[list[tuple[Any, ...]]]:
    """The kept running jobs' order keys, queue by queue (a kept entry's view and
    service are those of the round that ranked it)."""
    assert state.running is not None
    return [[e[:4] + e[5:6] for e in bucket] for bucket in state.running.buckets]


def _crossings_agree(kept: TiresiasState, fresh: TiresiasState) -> bool:
    """The same jobs cross, at kept times within rounding of the times ranked now."""
    assert kept.running is not None and fresh.running is not None
    a = {jid: t for t, jid in kept.running.crossings}
    b = {jid: t for t, jid in fresh.running.crossings}
    return a.keys() == b.keys() and all(abs(a[j] - b[j]) < 1e-6 for j in a)


def _replay(seed: int, policy: Tiresias, failures: bool) -> Compared:
    rng = random.Random(seed)
    cluster = make_cluster(nodes=3, gpus=4)
    jobs = [
        make_job(
            f"j{i:03d}",
            rng.choice([1, 1, 1, 2, 2, 4, 8]),
            submit_s=rng.uniform(0, 4 * 3600),
            duration_s=rng.choice([rng.uniform(60, 1800), rng.uniform(3600, 40_000)]),
            model=rng.choice(["resnet50", "vgg16", "bert", "cifar10"]),
        )
        for i in range(90)
    ]
    events: tuple[NodeEvent, ...] = ()
    if failures:
        down = rng.uniform(3600, 20_000)
        events = (NodeEvent(down, "n1", up=False), NodeEvent(down + 5000, "n1", up=True))
    compared = Compared(policy)
    config = SimConfig(round_interval_s=60.0, check_plans=True, failures=events)
    Simulator(cluster, jobs, compared, ConsolidatedPlacer(cluster), config).run()
    return compared


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    starve_limit=st.sampled_from([0.0, 0.5, 2.0, 8.0]),
    gittins=st.booleans(),
    failures=st.booleans(),
)
def test_kept_ranking_equals_ranking_from_scratch(
    seed: int, starve_limit: float, gittins: bool, failures: bool
) -> None:
    samples = (500.0, 2000.0, 4000.0, 9000.0, 30_000.0) if gittins else ()
    policy = Tiresias(starve_limit=starve_limit, service_samples_gpu_s=samples)
    compared = _replay(seed, policy, failures)
    assert compared.mismatches == []
    assert compared.kept_rounds >= compared.rounds - 1  # every round after the first


def test_a_state_used_twice_is_ranked_afresh_the_second_time() -> None:
    """Copy-on-write: the round that takes a state's kept ranking hands it on; a second
    round on that state ranks from scratch and decides the same."""
    compared = _replay(3, Tiresias(), failures=False)
    assert compared.mismatches == [] and compared.rounds > 100
    first = Tiresias()
    cluster = make_cluster(nodes=1, gpus=4)
    jobs = [make_job(f"j{i}", 2, submit_s=0.0, duration_s=5000.0) for i in range(5)]
    sim = Simulator(cluster, jobs, first, ConsolidatedPlacer(cluster))
    sim.advance(60.0)
    state = sim.controller.state
    assert isinstance(state, TiresiasState) and state.kept is not None
    snapshot = sim.observe()
    once = first.schedule(snapshot, state)
    assert state.kept.holder is not state  # taken
    twice = first.schedule(snapshot, state)
    assert dict(once.run) == dict(twice.run) and once.reasons == twice.reasons
    assert once.state == twice.state
    assert isinstance(twice.state, TiresiasState) and twice.state.kept is not None
    assert twice.state.kept is not state.kept  # its own, built afresh
