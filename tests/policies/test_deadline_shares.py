"""Minimum satisfactory shares (ElasticFlow §4.1): the fewest GPUs that finish each
deadline job in time, planned in deadline order, each job leaving the slots it holds
to the ones after it."""

from __future__ import annotations

import pytest

from policies.elasticflow.shares import (
    SLOT_S,
    Curve,
    Demand,
    allowed_sizes,
    min_share,
    plan_shares,
)

# 1, 2 and 4 GPUs at 1, 2 and 3.5 iterations per second.
CURVE = Curve((1, 2, 4), (1.0, 2.0, 3.5))


def _demand(job_id: str, due_s: float, remaining: float) -> Demand:
    return Demand(job_id, due_s, remaining, CURVE)


@pytest.mark.parametrize(
    ("remaining", "gpus", "finish_s"),
    [
        (300.0, 1, 300.0),  # 1 GPU for the 300 s it has
        (301.0, 2, 150.5),  # one iteration more: the next size
        (600.0, 2, 300.0),  # exactly on time on 2
        (1050.0, 4, 300.0),
    ],
)
def test_a_job_alone_gets_the_smallest_size_that_finishes_by_its_deadline(
    remaining: float, gpus: int, finish_s: float
) -> None:
    share = min_share(0.0, 4, _demand("a", 300.0, remaining))
    assert share is not None
    assert (share.gpus, share.now_gpus) == (gpus, gpus)
    assert share.finish_s == pytest.approx(finish_s)


def test_no_share_is_enough_for_more_than_the_largest_size_can_do() -> None:
    assert min_share(0.0, 4, _demand("a", 300.0, 1051.0)) is None
    assert min_share(0.0, 2, _demand("a", 300.0, 601.0)) is None  # 4 GPUs would, 2 exist


def test_a_later_job_plans_in_what_the_earlier_ones_leave() -> None:
    first, second = _demand("first", 300.0, 600.0), _demand("second", 300.0, 700.0)
    shares, missed = plan_shares(0.0, 4, [first, second])
    assert shares["first"].gpus == 2 and missed == ["second"]  # 2 left: 600 < 700
    shares, missed = plan_shares(0.0, 8, [first, second])
    assert (shares["first"].gpus, shares["second"].gpus, missed) == (2, 4, [])


def test_a_job_waits_for_the_slots_an_earlier_deadline_frees() -> None:
    early = _demand("early", 2 * SLOT_S, 4 * SLOT_S)  # 2 GPUs for two slots
    late = _demand("late", 10 * SLOT_S, 16 * SLOT_S)  # 2 GPUs for 8 of its 10 slots
    shares, missed = plan_shares(0.0, 2, [early, late])
    assert missed == []
    assert (shares["late"].gpus, shares["late"].now_gpus) == (2, 0)
    assert shares["late"].finish_s == pytest.approx(10 * SLOT_S)


@pytest.mark.parametrize(
    ("min_gpus", "max_gpus", "total", "sizes"),
    [
        (1, 64, 16, (1, 2, 4, 8, 16)),
        (2, 12, 64, (2, 4, 8)),
        (3, 3, 64, (3,)),  # not elastic: its one size
        (3, 3, 2, ()),  # larger than the cluster
        (5, 7, 64, (5,)),  # no power of two in range: its smallest size
    ],
)
def test_allowed_sizes_are_powers_of_two_in_range(
    min_gpus: int, max_gpus: int, total: int, sizes: tuple[int, ...]
) -> None:
    assert allowed_sizes(min_gpus, max_gpus, total) == sizes


def test_a_job_with_nothing_left_needs_no_gpus() -> None:
    shares, missed = plan_shares(0.0, 0, [_demand("done", 60.0, 0.0)])
    assert missed == [] and shares["done"].now_gpus == 0 and shares["done"].finish_s == 0.0


def test_a_deadline_years_away_plans_in_a_bounded_number_of_slots() -> None:
    work = 3e9 / 60  # 3e9 s of work at 1/60 iteration per second
    slow = Curve((1,), (1.0 / 60,))
    far = Demand("far", 1e10, work, slow)
    share = min_share(0.0, 1, far)
    assert share is not None and share.gpus == 1
    assert share.finish_s == pytest.approx(3e9)
    assert min_share(0.0, 1, Demand("late", 1e10, 1e10 / 60 + 1, slow)) is None
