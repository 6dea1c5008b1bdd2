"""The pool's whole-GPU claims, releases and fit tests (controller.model.pool), each
node's bucket moved once per allocation, against the pool's invariants and its
per-share fit test, over random sequences of starts and stops (hypothesis)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Allocation, GpuPool


def _check(pool: GpuPool) -> None:
    for node in range(pool.num_nodes):
        free = pool.free_gpus(node)
        assert free == sorted(set(free))
        for k, bucket in enumerate(pool.buckets):
            assert (node in bucket) == (len(free) == k)
    assert pool.total_free == sum(len(pool.free_gpus(n)) for n in range(pool.num_nodes))


def _fits_by_share(pool: GpuPool, alloc: Allocation) -> bool:
    return all(pool._fits_share(s, 0) for s in alloc.shares)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), cordon=st.booleans())
def test_claims_and_releases_keep_the_buckets(seed: int, cordon: bool) -> None:
    rng = random.Random(seed)
    pool = GpuPool([4, 4, 8], [1000, 1000, 1000])
    held: list[Allocation] = []
    for step in range(60):
        if cordon and step == 30:
            pool.cordon(1)  # its free GPUs fenced, those released later too
        gpus = [(n, g) for n in range(pool.num_nodes) for g in range(4 if n < 2 else 8)]
        alloc = Allocation.whole(rng.sample(gpus, rng.choice([1, 2, 3, 5])))
        assert pool.fits(alloc, None) == _fits_by_share(pool, alloc)
        if held and rng.random() < 0.4:
            pool.release(held.pop(rng.randrange(len(held))))
        elif pool.fits(alloc, None):
            pool.claim(alloc)
            held.append(alloc)
        _check(pool)


def test_a_gpu_released_twice_raises() -> None:
    pool = GpuPool([4], [1000])
    alloc = Allocation.whole([(0, 1), (0, 2)])
    pool.claim(alloc)
    pool.release(alloc)
    with pytest.raises(ValueError):
        pool.release(alloc)
