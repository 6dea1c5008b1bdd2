"""The phase-level model's one-link form (`shared_link_iteration_s`) and its event loop."""

from __future__ import annotations

import math
import random

import pytest

from controller.network.phases import PhaseJob, periodic_iterations, shared_link_iteration_s


@pytest.mark.parametrize(
    ("compute_s", "comm_mb", "gbps"),
    [(1.0, 125.0, 1.0), (0.25, 40.0, 25.0), (0.0, 10.0, 10.0), (3.0, 0.0, 10.0)],
)
def test_a_job_alone_takes_compute_plus_transfer(compute_s: float, comm_mb: float, gbps: float):
    (got,) = shared_link_iteration_s([compute_s], [comm_mb], [0.3], gbps)
    assert got == pytest.approx(compute_s + comm_mb / (125.0 * gbps), rel=1e-9)


def test_cassini_pair_in_phase_collides_and_shifted_interleaves():
    # compute 1 s, burst 1 s alone: in phase both bursts take 2 s; shifted by half a
    # period (1 s) they take turns and each runs as if alone.
    in_phase = shared_link_iteration_s([1.0, 1.0], [125.0, 125.0], [0.0, 0.0], 1.0)
    shifted = shared_link_iteration_s([1.0, 1.0], [125.0, 125.0], [0.0, 1.0], 1.0)
    assert in_phase == pytest.approx((3.0, 3.0))
    assert shifted == pytest.approx((2.0, 2.0))


def test_partial_overlap_under_fair_keeps_its_pattern():
    # B starts its burst 0.5 s after A: A finishes at +1.5 s, B at +2 s; period 2.5 s.
    got = shared_link_iteration_s([1.0, 1.0], [125.0, 125.0], [0.0, 0.5], 1.0)
    assert got == pytest.approx((2.5, 2.5))


def test_mltcp_slides_a_partial_overlap_into_interleaving():
    fair = shared_link_iteration_s([1.0, 1.0], [125.0, 125.0], [0.0, 0.5], 1.0, "fair")
    mltcp = shared_link_iteration_s([1.0, 1.0], [125.0, 125.0], [0.0, 0.5], 1.0, "mltcp")
    assert mltcp[0] < fair[0] and mltcp[1] < fair[1]
    assert mltcp == pytest.approx((2.0, 2.0), rel=0.02)


def test_priority_lets_the_low_job_fill_the_high_jobs_compute_gap():
    got = shared_link_iteration_s(
        [1.0, 1.0], [125.0, 125.0], [0.0, 0.0], 1.0, "priority", priority=[1, 0]
    )
    assert got == pytest.approx((2.0, 2.0))


def test_link_is_never_overcommitted_over_the_periodic_regime():
    # Busy time is bounded below by the bytes: sum of comm / capacity per period.
    compute, comm = [0.2, 0.5, 0.1], [30.0, 60.0, 20.0]
    got = shared_link_iteration_s(compute, comm, [0.0, 0.05, 0.13], 2.0)
    # Each job's iteration is at least its own compute plus its bytes at full capacity.
    for t, c, m in zip(got, compute, comm, strict=True):
        assert t >= c + m / 250.0 - 1e-9
    # The link carries no more than its capacity on average.
    assert sum(m / t for t, m in zip(got, comm, strict=True)) <= 250.0 * (1 + 1e-9)


def test_unequal_periods_are_measured_over_the_slow_jobs_period():
    got = periodic_iterations(
        [
            PhaseJob("fast", 0.09, 1.25, ("l",)),
            PhaseJob("slow", 1.0, 12.5, ("l",), offset_s=0.37),
        ],
        {"l": 1.0},
    )
    assert 0.1 <= got["fast"] < 0.2 and 1.1 <= got["slow"] < 1.3


def test_a_job_capped_below_the_link_stays_at_its_cap():
    got = periodic_iterations([PhaseJob("a", 1.0, 125.0, ("l",), max_gbps=0.5)], {"l": 10.0})
    assert got["a"] == pytest.approx(3.0)


def test_strict_priority_behind_a_saturating_job_starves():
    got = periodic_iterations(
        [PhaseJob("hi", 0.0, 1.0, ("l",), priority=1), PhaseJob("lo", 1.0, 1.0, ("l",))],
        {"l": 1.0},
        "priority",
    )
    assert got["hi"] == pytest.approx(0.008) and math.isinf(got["lo"])


def test_a_floor_keeps_the_job_behind_a_saturating_level_moving():
    got = periodic_iterations(
        [
            PhaseJob("hi", 0.0, 1.0, ("l",), priority=1),
            PhaseJob("lo", 1.0, 1.0, ("l",), floor_gbps=0.1),
        ],
        {"l": 1.0},
        "priority",
    )
    # lo sends its 1 MB at its floor (0.1 Gbit/s: 0.08 s); hi has the other 0.9.
    assert got["lo"] == pytest.approx(1.0 + 1.0 / 125.0 / 0.1)
    assert got["hi"] == pytest.approx(0.008, rel=0.15)


@pytest.mark.parametrize("seed", range(20))
def test_under_priority_with_floors_every_burst_progresses(seed: int):
    """Levels that together keep the links busy starve nobody who has a floor: each
    job iterates at least as fast as its compute plus its burst at its floor."""
    rng = random.Random(seed)
    links = ["a", "b", "c"]
    capacities = {link: 10.0 for link in links}
    jobs = [
        PhaseJob(
            f"j{i}",
            rng.choice([0.0, rng.uniform(0.01, 0.5)]),
            rng.uniform(10.0, 300.0),
            tuple(rng.sample(links, rng.randint(1, 3))),
            offset_s=rng.uniform(0.0, 0.3),
            priority=rng.randrange(4),
            floor_gbps=0.1,
        )
        for i in range(rng.randint(3, 8))
    ]
    got = periodic_iterations(jobs, capacities, "priority")
    for job in jobs:
        bound = job.compute_s + job.comm_mb / 125.0 / job.floor_gbps
        assert math.isfinite(got[job.job_id])
        assert got[job.job_id] <= bound * (1 + 1e-6)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"capacity_gbps": 0.0}, "capacity_gbps"),
        ({"compute_s": [-1.0]}, "compute_s"),
        ({"comm_mb": [float("nan")]}, "comm_mb"),
        ({"offset_s": [-0.1]}, "offset_s"),
        ({"sharing": "wfq"}, "sharing rule"),
        ({"offset_s": [0.0, 1.0]}, "one entry per job"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str):
    args: dict[str, object] = {
        "compute_s": [1.0],
        "comm_mb": [1.0],
        "offset_s": [0.0],
        "capacity_gbps": 1.0,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        shared_link_iteration_s(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("sharing", ["fair", "mltcp"])
def test_the_default_horizon_is_close_to_a_long_one(sharing: str):
    rng = random.Random(11)
    for _ in range(6):
        jobs = [
            PhaseJob(
                f"j{i}",
                rng.uniform(0.05, 2.0),
                rng.uniform(5.0, 200.0),
                ("l",) if rng.random() < 0.7 else ("l", "m"),
                offset_s=rng.uniform(0.0, 1.0),
            )
            for i in range(rng.randint(2, 4))
        ]
        caps = {"l": 10.0, "m": 5.0}
        short = periodic_iterations(jobs, caps, sharing)
        long = periodic_iterations(jobs, caps, sharing, warmup=60, measured=120)
        for job_id, t in long.items():
            assert short[job_id] == pytest.approx(t, rel=0.03)
