"""POP's partitioning of Gavel's allocation (policies/gavel/pop.py): the full LP's
answer where the parts are copies of each other, a loss it can be held to where not,
and the policy option that turns it on (issue 31)."""

from __future__ import annotations

import numpy as np
import pytest

from policies.gavel import allocation as alloc
from policies.gavel import pop as gavel_pop
from policies.registry import UnknownPolicyError, make_policy
from tests.policies.test_gavel import slice_replay


def las(rows: gavel_pop.Rows, workers: gavel_pop.Matrix, t: gavel_pop.Matrix) -> gavel_pop.Matrix:
    n = len(rows)
    return alloc.max_min_fairness(t[rows], np.ones(n), np.ones(n), workers, aware=True)


def fairness(t: gavel_pop.Matrix, x: gavel_pop.Matrix, workers: gavel_pop.Matrix) -> float:
    """LAS's objective for the whole cluster: the least throughput under x over the
    throughput under the cluster's equal share (single-GPU jobs, weights 1)."""
    ones = np.ones(len(t))
    equal = alloc.max_min_fairness(t, ones, ones, workers, aware=False)
    return float(np.min((t * x).sum(axis=1) / (t * equal).sum(axis=1)))


def test_parts_deal_the_rows_round_robin() -> None:
    assert [p.tolist() for p in gavel_pop.parts(5, 2)] == [[0, 2, 4], [1, 3]]
    assert [p.tolist() for p in gavel_pop.parts(2, 4)] == [[0], [1]]
    assert gavel_pop.default_k(999) == 1
    assert gavel_pop.default_k(1000) == 1
    assert gavel_pop.default_k(1001) == 2
    assert gavel_pop.default_k(0) == 1


def test_pop_is_the_full_lp_where_the_parts_are_alike() -> None:
    """Two jobs 4x faster on type 0, then two 4x faster on type 1: dealt round-robin,
    each of two parts holds one of each and one GPU of each type, so each part's
    optimum (each job on its fast type) is the whole cluster's."""
    t = np.array([[4.0, 1.0], [4.0, 1.0], [1.0, 4.0], [1.0, 4.0]])
    workers = np.array([2.0, 2.0])
    full = las(np.arange(4), workers, t)
    pop = gavel_pop.partitioned(4, 2, 2, workers, lambda rows, w: las(rows, w, t))
    assert full == pytest.approx(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    assert pop == pytest.approx(full)


def test_pop_loses_where_one_part_needs_another_parts_gpus() -> None:
    """The same jobs in the order fast-0, fast-1, fast-0, fast-1: both jobs fast on
    type 0 are dealt to part 0, both fast on type 1 to part 1, and each part has one
    GPU of each type, so its two jobs split the fast one (0.5 each) and the slow one.
    Full: 4 / 2.5 = 1.6x the equal share for every job; POP: 2.5 / 2.5."""
    t = np.array([[4.0, 1.0], [1.0, 4.0], [4.0, 1.0], [1.0, 4.0]])
    workers = np.array([2.0, 2.0])
    full = las(np.arange(4), workers, t)
    pop = gavel_pop.partitioned(4, 2, 2, workers, lambda rows, w: las(rows, w, t))
    assert fairness(t, full, workers) == pytest.approx(1.6, rel=1e-5)
    assert fairness(t, pop, workers) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("k", [2, 4])
def test_pop_on_many_small_jobs_stays_near_the_full_lp(k: int) -> None:
    """POP's premise (granular problems): 200 single-GPU jobs of random speeds on 3
    types. Its X fits the whole cluster (each type's GPUs summed over the parts) and
    its fairness is within 5 % of the full LP's, never above it."""
    rng = np.random.default_rng(7)
    t = rng.uniform(0.5, 5.0, (200, 3))
    workers = np.array([30.0, 35.0, 40.0])
    full = las(np.arange(200), workers, t)
    pop = gavel_pop.partitioned(200, 3, k, workers, lambda rows, w: las(rows, w, t))
    assert np.all(pop.sum(axis=0) <= workers * (1 + 1e-6))
    assert np.all(pop.sum(axis=1) <= 1 + 1e-6)
    best, got = fairness(t, full, workers), fairness(t, pop, workers)
    assert best * 0.95 <= got <= best * (1 + 1e-6)


def test_pop_k_is_a_policy_option_of_one_or_more() -> None:
    assert make_policy("gavel-las", pop_k=4).pop_k == 4  # type: ignore[attr-defined]
    with pytest.raises(UnknownPolicyError, match="pop_k must be >= 1"):
        make_policy("gavel-las", pop_k=0)


@pytest.mark.parametrize("policy", ["gavel-las", "gavel-makespan"])
def test_a_replay_split_in_two_finishes_every_job(policy: str) -> None:
    """The twelve-job slice (tests/policies/test_gavel.py) with pop_k=2: every job
    finishes, and at k=1 (below 1,000 jobs, the default) the replay is unchanged."""
    assert slice_replay(policy, True, pop_k=1) == slice_replay(policy, True)
    jct, makespan = slice_replay(policy, True, pop_k=2)
    assert jct > 0.0 and makespan > 0.0
