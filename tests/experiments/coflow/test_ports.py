"""The port-fabric fast path against the generic allocators: same rates on random
instances, same replay (events and completion times) on prefixes of the FB trace."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from controller.network.allocators import ALLOCATORS
from controller.network.allocators.waterfill import max_min_levels
from experiments.coflow.ports import PORT_RATES, PortArrays, bipartite_levels, port_arrays
from experiments.coflow.replay import ReplayConfig, replay, replay_reference
from experiments.coflow.trace import read_trace

FB_TRACE = Path(__file__).parents[3] / "data" / "coflow" / "FB2010-1Hr-150-0.txt"


def test_every_policy_has_a_port_form() -> None:
    assert set(PORT_RATES) == set(ALLOCATORS)


def random_instance(seed: int) -> PortArrays:
    rng = np.random.default_rng(seed)
    ports = int(rng.integers(2, 7))
    n_coflows = int(rng.integers(1, 5))
    capacity = rng.choice([0.0, 1.0, 2.5, 10.0], size=2 * ports, p=[0.05, 0.45, 0.25, 0.25])
    src_l, dst_l, owner_l = [], [], []
    for c in range(n_coflows):
        # One flow per (mapper, reducer) pair of the coflow, as in the trace.
        mappers = rng.choice(ports, size=int(rng.integers(1, ports + 1)), replace=False)
        reducers = rng.choice(ports, size=int(rng.integers(1, ports + 1)), replace=False)
        pairs = [(m, r) for m in mappers for r in reducers if rng.random() < 0.8]
        for m, r in pairs or [(mappers[0], reducers[0])]:
            src_l.append(m)
            dst_l.append(r)
            owner_l.append(c)
    n = len(src_l)
    return port_arrays(
        capacity_gbps=capacity.astype(np.float64),
        src=np.array(src_l, dtype=np.int64),
        dst=np.array(dst_l, dtype=np.int64),
        coflow=np.array(owner_l, dtype=np.int64),
        remaining_mb=rng.choice([1.0, 5.0, 12.5, 80.0, 400.0], size=n)
        * rng.uniform(0.5, 1.5, size=n),
        attained_mb=rng.choice([0.0, 5.0, 50.0, 500.0], size=n_coflows),
        weight=rng.choice([1.0, 0.5, 3.0], size=n_coflows),
    )


@pytest.mark.parametrize("policy", sorted(ALLOCATORS))
def test_port_rates_equal_the_generic_allocators(policy: str) -> None:
    for seed in range(150):
        arrays = random_instance(seed)
        fast = PORT_RATES[policy](arrays)
        generic = ALLOCATORS[policy].rates(arrays.to_flow_arrays())
        np.testing.assert_allclose(fast, generic, rtol=1e-9, atol=1e-12, err_msg=f"seed {seed}")


def test_bipartite_levels_equal_progressive_filling() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        rows, cols = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        count = rng.choice([0.0, 0.0, 1.0, 2.0, 5.0], size=(rows, cols))
        cap = rng.choice([0.0, 1.0, 3.0, 10.0], size=rows + cols)
        up, down = bipartite_levels(count, cap[:rows], cap[rows:])
        i, j = np.nonzero(count)
        flat = np.arange(i.size)
        levels = max_min_levels(
            cap,
            np.concatenate([flat, flat]),
            np.concatenate([i, rows + j]),
            i.size,
            count[i, j],
        )
        np.testing.assert_allclose(np.minimum(up[i], down[j]), levels, rtol=1e-12, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(ALLOCATORS))
@pytest.mark.parametrize(("first", "last"), [(0, 20), (300, 312), (450, 470)])
@pytest.mark.parametrize("reallocate", ["coflowsim", "flow"])
def test_fast_replay_equals_the_reference_on_trace_prefixes(
    policy: str, first: int, last: int, reallocate: str
) -> None:
    # The trace's first 20 coflows (31,780 flows) and two later slices.
    trace = read_trace(FB_TRACE)
    part = dataclasses.replace(trace, coflows=trace.coflows[first:last])
    config = ReplayConfig(reallocate=reallocate)
    fast = replay(part, policy, config)
    slow = replay_reference(part, policy, config)
    assert fast.events == slow.events
    got = np.array([o.finish_s for o in fast.outcomes])
    want = np.array([o.finish_s for o in slow.outcomes])
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert [o.coflow_id for o in fast.outcomes] == [o.coflow_id for o in slow.outcomes]
