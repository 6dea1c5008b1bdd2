"""controller.rates: the memoised speeds are the performance model's."""

from __future__ import annotations

import random

import pytest

from controller.model import Allocation
from controller.model.catalog import CATALOG
from controller.model.perf import throughput_ips
from controller.rates import RateModel
from tests.builders import make_cluster, make_job


@pytest.mark.parametrize("seed", range(20))
def test_memoised_speeds_equal_the_performance_model(seed: int) -> None:
    """Asked twice (the second answer from the caches), alone on the GPUs or beside
    a load, a speed is what `throughput_ips` computes afresh."""
    rng = random.Random(seed)
    cluster = make_cluster(nodes=3, gpus=4)
    rates = RateModel(cluster)
    gpus = [(n, g) for n in range(3) for g in range(4)]
    models = sorted(CATALOG)
    for i in range(30):
        spec = make_job(f"j{i}", rng.randint(1, 6), model=rng.choice(models))
        alloc = Allocation.whole(rng.sample(gpus, spec.num_gpus))
        batch = rng.choice([None, 16, 64])
        load = rng.choice([0.0, 0.0, 0.35])
        expected = throughput_ips(
            rates.profile(spec),
            cluster,
            alloc,
            batch_size=batch if batch is not None else spec.batch_size,
            gpu_load=load,
        )
        for _ in range(2):
            assert rates.rate_ips(spec, alloc, batch_size=batch, gpu_load=load) == expected
