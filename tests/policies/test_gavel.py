"""Gavel's policies (policies/gavel/__init__.py): the allocations as the paper states them, the
round-based mechanism, and a small heterogeneous replay where the aware policies beat
the blind ones (issue 31)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.model import JobSpec, JobStatus, Snapshot
from controller.model.perf.matrix import load_matrix
from controller.placement import make_placer
from controller.rates import RateModel
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from policies.gavel import allocation as alloc
from policies.gavel import arrival_key
from policies.gavel.rounds import Counters, assign, priorities
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_view

ROOT = Path(__file__).resolve().parents[2]
# Gavel places by itself (policies/gavel/rounds.place_units): no placer is asked.
NO_PLACER = make_placer("consolidated", make_cluster(nodes=1, gpus=2), 0)
ONE = np.ones(2)

# Job A runs 4x faster on type 0; job B the same on both (one GPU of each type).
FAST_SLOW = np.array([[4.0, 1.0], [1.0, 1.0]])


def test_las_aware_gives_the_fast_type_to_the_job_it_speeds_up() -> None:
    """Max-min of throughput normalised by the blind share (§4.1): B's is 1 wherever it
    runs, so A takes all of type 0 (1.6x its blind throughput) and B all of type 1."""
    x = alloc.max_min_fairness(FAST_SLOW, ONE, ONE, ONE, aware=True)
    assert x == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]))
    blind = alloc.max_min_fairness(FAST_SLOW, ONE, ONE, ONE, aware=False)
    assert blind == pytest.approx(np.full((2, 2), 0.5))


def test_las_weights_and_scale_factors_share_the_gpus() -> None:
    """Three jobs on 2 GPUs of one type. Blind: the 2-GPU job gets half the time of a
    1-GPU job (z_m X equal: the same GPU-time). Aware, normalised as Gavel's code does
    by the proportional share (every job's throughput on the types in proportion to
    their GPUs, here the one type's), the same: on one type aware LAS is the blind one,
    as Gavel's agnostic policy is its aware one with every rate 1 (the paper's X_equal
    would count z_m twice and give the 2-GPU job a quarter of a 1-GPU job's time). And
    a job of weight 2 gets twice the time of a job of weight 1."""
    t = np.ones((3, 1))
    scale = np.array([2.0, 1.0, 1.0])
    equal = alloc.max_min_fairness(t, scale, np.ones(3), np.array([2.0]), aware=False)
    assert equal[:, 0] == pytest.approx([1 / 3, 2 / 3, 2 / 3], rel=1e-5)
    x = alloc.max_min_fairness(t, scale, np.ones(3), np.array([2.0]), aware=True)
    assert x[:, 0] == pytest.approx(equal[:, 0], rel=1e-5)
    assert (x[:, 0] * scale).sum() == pytest.approx(2.0, rel=1e-5)
    weighted = alloc.max_min_fairness(t[:2], ONE, np.array([2.0, 1.0]), np.array([1.0]), aware=True)
    assert weighted[:, 0] == pytest.approx([2 / 3, 1 / 3], rel=1e-5)


def test_makespan_finishes_every_job_together() -> None:
    """A has 800 steps left, B 200: with A on the fast type (4/s) and B on the slow one
    (1/s), both finish at 200 s; the blind policy sees every type at the job's fastest
    rate and spreads each over both."""
    remaining = np.array([800.0, 200.0])
    x = alloc.min_makespan(FAST_SLOW, ONE, ONE, remaining, aware=True)
    finish = remaining / (FAST_SLOW * x).sum(axis=1)
    assert finish.max() == pytest.approx(200.0)
    blind = alloc.min_makespan(FAST_SLOW, ONE, ONE, remaining, aware=False)
    assert blind[:, 0] == pytest.approx(blind[:, 1])


@pytest.mark.parametrize("aware", [True, False])
def test_makespan_of_jobs_with_no_steps_left_is_bounded_below_as_gavels(aware: bool) -> None:
    """Jobs with next to no steps left (live jobs past their expected run; the policy
    floors a job's remaining steps at 1e-9) once made the LP unbounded: Gavel's
    makespan is at least 100 s (its bisection's min_T), so every job's throughput need
    only cover its steps over 100 s, and X stays within the cluster."""
    remaining = np.array([1e-9, 1e-9])
    x = alloc.min_makespan(FAST_SLOW, ONE, ONE, remaining, aware=aware)
    assert x.shape == (2, 2) and np.all(x >= 0.0) and np.all(x.sum(axis=1) <= 1.0 + 1e-9)
    assert np.all(x.sum(axis=0) <= ONE + 1e-9)
    # A makespan under the floor is not sought: 50 steps at 4/s is 12.5 s alone, but
    # any X that finishes both within 100 s will do.
    fifty = np.array([50.0, 50.0])
    quick = alloc.min_makespan(FAST_SLOW, ONE, ONE, fifty, aware=True)
    finish = fifty / np.maximum((FAST_SLOW * quick).sum(axis=1), 1e-12)
    assert finish.max() <= alloc.MIN_MAKESPAN_S * (1.0 + 1e-6)


def test_makespan_policy_recomputes_at_every_change_with_no_reset_period() -> None:
    """gavel-makespan with `reset_interval_s=0` (the operator tests' setting) recomputes
    X whenever the job set changes, also when a job leaves and the running ones have
    done all the steps they were expected to (live jobs run past their estimate): it
    plans that round instead of failing, and keeps both running."""
    cluster = make_cluster(nodes=1, gpus=2)
    specs = [make_job(f"j{i}") for i in range(3)]
    policy = make_policy("gavel-makespan", round_s=1.0, reset_interval_s=0.0)
    first = policy.schedule(
        Snapshot(0.0, cluster, tuple(make_view(j) for j in specs), NO_PLACER), None
    )
    assert len(first.run) == 2
    running = tuple(
        make_view(j, status=JobStatus.RUNNING, allocation=first.run[j.job_id], done_iters=100.0)
        for j in specs
        if j.job_id in first.run
    )
    plan = policy.schedule(Snapshot(150.0, cluster, running, NO_PLACER), first.state)
    assert dict(plan.run) == dict(first.run)


def test_ftf_bounds_every_jobs_finish_time_ratio() -> None:
    """Finish-time fairness: rho = finish time under X / under the equal share. B runs
    at 1/s anywhere, so no X brings its rho below 1; among the allocations at that
    optimum, A takes the fast type and finishes at 0.625 of its equal-share time."""
    remaining = np.array([8.0, 2.0])
    since = np.zeros(2)
    x = alloc.finish_time_fairness(FAST_SLOW, ONE, ONE, ONE, since, remaining, aware=True)
    equal = np.full((2, 2), 0.5)
    rho = (remaining / (FAST_SLOW * x).sum(axis=1)) / (remaining / (FAST_SLOW * equal).sum(axis=1))
    assert rho == pytest.approx([0.625, 1.0], rel=1e-2)


def test_fifo_aware_takes_the_fastest_type_and_stops_at_the_first_that_fits_nowhere() -> None:
    t = np.array([[4.0, 1.0], [4.0, 1.0], [2.0, 1.0], [1.0, 1.0]])
    scale = np.array([1.0, 1.0, 2.0, 1.0])
    x = alloc.fifo(t, scale, np.array([1.0, 2.0]))
    # a: type 0; b: type 1 (type 0 full); c needs 2, one left: FIFO stops there.
    assert x.tolist() == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_fifo_agnostic_gives_the_last_type_by_name_past_its_gpus_as_gavels_code() -> None:
    """Gavel's mode 'base' draws an index and takes the last listed type: five 1-GPU
    jobs on 2 + 2 GPUs all go to type 1, which never reaches exactly 0 again once past
    it (here it does at the second job, and the draw drops a type from the list)."""
    t = np.ones((5, 2))
    scale = np.ones(5)
    rng = random.Random(0)
    x = alloc.fifo_agnostic(t, scale, np.array([2.0, 2.0]), [], rng)
    draws = random.Random(0)
    # Job 0: type 1 (2 -> 1); job 1: type 1 (1 -> 0), the list loses the type at the
    # drawn index of [0, 1]; then the other type is the last listed, or none is.
    first, second = draws.randrange(2), draws.randrange(2)
    assert first in (0, 1)
    assert x[:2].tolist() == [[0.0, 1.0], [0.0, 1.0]]
    if second == 1:  # type 1 dropped: type 0 is last, takes two jobs, then none left
        assert x[2:].tolist() == [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    else:  # type 0 dropped though free: type 1 is last, and job 2 finds no room
        assert x[2:].tolist() == [[0.0, 0.0]] * 3


def test_fifo_agnostic_over_fills_the_last_type_while_another_has_room() -> None:
    """Three types of 3, 3 and 1 GPUs and 1-GPU jobs: the first job takes type 2 (the
    last), which reaches 0, and the list loses the type at the drawn index. Where the
    draw drops type 0, type 2 stays listed and last, so every later job goes to it
    (X = 1 each, its GPUs -1, -2, ...) while type 1's three GPUs stay out of the
    allocation: Gavel's blind FIFO on its own trace."""
    seed = next(s for s in range(50) if random.Random(s).randrange(3) == 0)
    x = alloc.fifo_agnostic(
        np.ones((6, 3)), np.ones(6), np.array([3.0, 3.0, 1.0]), [], random.Random(seed)
    )
    assert x[:, 2].tolist() == [1.0] * 6
    assert x[:, :2].sum() == 0.0


def test_fifo_agnostic_keeps_types_and_offers_a_finished_jobs_type_to_the_head() -> None:
    """A job keeps its type; a finished job's type goes to the head of the queue if it
    fits there (Gavel: before the free types are drawn from)."""
    t = np.ones((2, 2))
    # Row 0 kept on type 0; a finished job had type 1; row 1 (the head) takes type 1.
    x = alloc.fifo_agnostic(
        t, np.ones(2), np.array([1.0, 1.0]), [(0, 0), (None, 1)], random.Random(0)
    )
    assert x.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_the_mechanism_runs_the_job_furthest_below_its_fraction() -> None:
    """Priority = X / share of time received (Gavel §5): two jobs with X = 0.5 on one
    GPU alternate; a job with no time yet goes first."""
    rates = {"a": (1.0,), "b": (1.0,)}
    x = {"a": (0.5,), "b": (0.5,)}
    counters = Counters().reset(["a", "b"], {}, 0.0, 360.0, 1)
    first = assign(
        priorities(x, rates, counters, ["a", "b"], 1), ["a", "b"], {"a": 1, "b": 1}, rates, [1]
    )
    counters = counters.ran(first, 360.0, 1)
    second = assign(
        priorities(x, rates, counters, ["a", "b"], 1), ["a", "b"], {"a": 1, "b": 1}, rates, [1]
    )
    assert first.keys() != second.keys()
    assert len(first) == len(second) == 1


def slice_replay(policy: str, aware: bool, **options: object) -> tuple[float, float]:
    """Twelve Gavel job types on a server each of 4 V100, P100 and K80, all at 0, with
    the shipped single-job entries of Gavel's matrix; (average JCT, makespan) in s;
    `options` go to the policy."""
    cluster_file = ROOT / "tests/policies/data/gavel-4-4-4.yaml"
    cluster = load_cluster(str(cluster_file))
    matrix = load_matrix(ROOT / "controller/model/profiles/gavel/throughputs.json")
    types = [
        ("ResNet-50", 64, 1, 20000),
        ("ResNet-18", 128, 1, 60000),
        ("Transformer", 64, 1, 40000),
        ("LM", 40, 1, 30000),
        ("CycleGAN", None, 1, 10000),
        ("A3C", None, 1, 20000),
        ("ResNet-50", 32, 2, 15000),
        ("ResNet-18", 64, 2, 50000),
        ("Transformer", 128, 1, 20000),
        ("LM", 80, 1, 20000),
        ("ResNet-18", 256, 4, 30000),
        ("ResNet-50", 128, 1, 10000),
    ]
    jobs = [
        JobSpec(
            job_id=f"g{i:02d}", submit_s=0.0, num_gpus=n, model=m, batch_size=b, iterations=steps
        )
        for i, (m, b, n, steps) in enumerate(types)
    ]
    sim = Simulator(
        cluster,
        jobs,
        make_policy(policy, aware=aware, **options),
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=360.0, restart_s=0.0),
        rates=RateModel(cluster, matrix),
    )
    result = sim.run()
    finish = [j.finish_s for j in result.jobs]
    assert all(f is not None for f in finish)
    done = [f for f in finish if f is not None]
    return sum(done) / len(done), max(done)


@pytest.mark.parametrize("policy", ["gavel-las", "gavel-ftf", "gavel-fifo", "gavel-makespan"])
def test_aware_beats_blind_on_a_heterogeneous_slice(policy: str) -> None:
    aware_jct, aware_makespan = slice_replay(policy, True)
    blind_jct, blind_makespan = slice_replay(policy, False)
    if policy == "gavel-makespan":
        assert aware_makespan < blind_makespan
    else:
        assert aware_jct < blind_jct


def test_between_rounds_the_policy_keeps_every_job_where_it_is() -> None:
    """However often the backend asks, jobs move only when a 360 s round is due."""
    cluster = make_cluster(nodes=1, gpus=2)
    specs = [make_job(f"j{i}") for i in range(3)]
    first_snapshot = Snapshot(0.0, cluster, tuple(make_view(j) for j in specs), NO_PLACER)
    policy = make_policy("gavel-las")
    first = policy.schedule(first_snapshot, None)
    assert len(first.run) == 2 and first.wake_s == 360.0
    running = tuple(
        make_view(j, status=JobStatus.RUNNING, allocation=first.run[j.job_id])
        if j.job_id in first.run
        else make_view(j)
        for j in specs
    )
    later = policy.schedule(Snapshot(60.0, cluster, running, NO_PLACER), first.state)
    assert dict(later.run) == dict(first.run) and later.state is first.state
    assert later.wake_s == 360.0
    due = policy.schedule(Snapshot(360.0, cluster, running, NO_PLACER), first.state)
    # The job left out in round one runs in round two (it is furthest below its share).
    waiting = next(j.job_id for j in specs if j.job_id not in first.run)
    assert waiting in due.run


def test_a_replay_hands_the_policy_its_own_speeds_per_type() -> None:
    """The snapshot's type_rates are the simulator's rate model, matrix and all, so a
    Gavel policy plans with the speeds the jobs then run at."""
    cluster = load_cluster(str(ROOT / "tests/policies/data/gavel-4-4-4.yaml"))
    rates = RateModel(
        cluster, load_matrix(ROOT / "controller/model/profiles/gavel/throughputs.json")
    )
    sim = Simulator(
        cluster,
        [make_job("j0")],
        make_policy("gavel-las"),
        make_placer("consolidated", cluster, 0),
        rates=rates,
    )
    assert sim.observe().type_rates is rates


def test_replay_takes_throughputs_and_gavel_options_from_the_command_line(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuflow.cli",
            "compare",
            str(ROOT / "examples/traces/gavel_mixed.trace"),
            "-c",
            str(ROOT / "tests/policies/data/gavel-4-4-4.yaml"),
            "--throughputs",
            str(ROOT / "controller/model/profiles/gavel/throughputs.json"),
            "--interval",
            "360",
            "--policies",
            "gavel-las,gavel-makespan",
            "--policy-opt",
            "gavel-makespan:aware=false",
            "--jobs",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=ROOT,
    )
    heads = json.loads(out.stdout)
    assert [h["policy"] for h in heads] == ["gavel-las", "gavel-makespan"]
    assert all(h["jobs"] == 6 and h["makespan_s"] > 0 for h in heads)


def test_jobs_are_in_the_traces_order_and_fifo_leaves_unallocated_jobs_out() -> None:
    ids = ["gavel-10", "gavel-2", "gavel-1"]
    views = sorted((make_view(make_job(i)) for i in ids), key=arrival_key)
    assert [v.job_id for v in views] == ["gavel-1", "gavel-2", "gavel-10"]
    # b has no time fraction (priority 0): it takes the GPU left over, but not under FIFO.
    rates = {"a": (1.0,), "b": (1.0,)}
    entries = priorities({"a": (1.0,)}, rates, Counters(), ["a", "b"], 1)
    assert assign(entries, ["a", "b"], {"a": 1, "b": 1}, rates, [2]) == {"a": 0, "b": 0}
    fifo = assign(entries, ["a", "b"], {"a": 1, "b": 1}, rates, [2], allocated_only=True)
    assert fifo == {"a": 0}
