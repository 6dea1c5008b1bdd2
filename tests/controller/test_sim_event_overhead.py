"""ElasticFlow's per-event overhead in the simulator (`SimConfig.event_overhead`, issue
32): its formula as ElasticFlow's simulator states it, and every running job held for
it after every round, restarted or not."""

from __future__ import annotations

import pytest

from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.sim.runs import event_overhead_s
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


@pytest.mark.parametrize(
    ("gpus", "cluster_gpus", "restart", "want_s"),
    [
        (1, 64, False, 4.0),  # 2 + 2 (log2 1 + 1)
        (4, 64, False, 8.0),  # 2 + 2 (2 + 1)
        (4, 64, True, 35.0),  # and a restart's 27 s
        (1, 256, False, 9.0),  # 7 s base from 256 GPUs
        (8, 256, True, 62.0),  # 7 + 47 + 2 (3 + 1)
    ],
)
def test_the_overhead_is_elasticflows(
    gpus: int, cluster_gpus: int, restart: bool, want_s: float
) -> None:
    assert event_overhead_s(gpus, cluster_gpus, restart) == pytest.approx(want_s)


def _finishes(event_overhead: bool) -> dict[str, float]:
    # Two 1-GPU jobs on separate GPUs: rounds when a arrives (0 s), when b arrives
    # (50 s), when a finishes and when b finishes.
    cluster = make_cluster(nodes=1, gpus=4)
    jobs = [make_job("a", duration_s=100.0), make_job("b", submit_s=50.0, duration_s=100.0)]
    config = SimConfig(round_interval_s=0.0, event_overhead=event_overhead, check_plans=True)
    result = Simulator(
        cluster, jobs, make_policy("fifo"), ConsolidatedPlacer(cluster), config
    ).run()
    out = {}
    for o in result.jobs:
        assert o.finish_s is not None
        out[o.job_id] = o.finish_s
    return out


def test_every_running_job_is_held_after_every_round() -> None:
    """a runs through the rounds at 0 and 50 s: 2 x 4 s later. b through those at 50 s
    and at a's finish: 2 x 4 s later too. Without the option neither is charged (a
    first start costs nothing)."""
    plain, charged = _finishes(False), _finishes(True)
    assert charged["a"] == pytest.approx(plain["a"] + 8.0)
    assert charged["b"] == pytest.approx(plain["b"] + 8.0)
