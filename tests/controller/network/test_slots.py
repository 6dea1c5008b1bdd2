"""The phase networks' live form: comm slots (cassini) and priority levels (crux)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.network.jobs import NetJob
from controller.network.phases.slots import SLOT_HEADROOM, LivePhase, live_phases
from controller.network.registry import phase_form
from tests.builders import make_cluster

CLUSTER = make_cluster(nodes=4, gpus=4)  # 100 Gbit/s NICs, one rack
NIC_MB_PER_S = 100.0 * 125.0
MB_PER_MIB = 2**20 / 1e6


def job(job_id: str, nodes: tuple[int, ...], burst_s: float, gpus: int = 8) -> NetJob:
    """A job whose ring moves `burst_s` of its slowest NIC's time per iteration (2 nodes:
    each flow carries the whole gradient)."""
    return NetJob(job_id, nodes, burst_s * NIC_MB_PER_S / MB_PER_MIB, gpus=gpus)


def iteration_s(compute_s: dict[str, float], jobs: list[NetJob]) -> Callable[[str, float], float]:
    by_id = {j.job_id: j for j in jobs}

    def at(job_id: str, gbps: float) -> float:
        return compute_s[job_id] + by_id[job_id].flow_mb / 125.0 / gbps

    return at


def phases(network: str, jobs: list[NetJob], compute_s: dict[str, float]) -> dict[str, LivePhase]:
    return live_phases(phase_form(network), CLUSTER, jobs, iteration_s(compute_s, jobs))


def turns_overlap_s(a: tuple[float, float], b: tuple[float, float], period: float) -> float:
    """Overlap of two bursts (start, length) on a circle of `period`."""
    total = 0.0
    for shift in (-period, 0.0, period):
        lo = max(a[0], b[0] + shift)
        hi = min(a[0] + a[1], b[0] + shift + b[1])
        total += max(0.0, hi - lo)
    return total


def test_two_equal_jobs_on_one_link_take_turns_half_a_period_apart() -> None:
    jobs = [job("a", (0, 1), 0.2), job("b", (0, 1), 0.2)]
    got = phases("cassini", jobs, {"a": 0.3, "b": 0.3})
    slots = {k: v.slot for k, v in got.items()}
    assert slots["a"] is not None and slots["b"] is not None
    period = slots["a"].period_s
    # The longest iteration alone (0.5 s) with the headroom, to the millisecond.
    assert period == slots["b"].period_s == pytest.approx(0.5 * (1 + SLOT_HEADROOM), abs=1e-3)
    gap = (slots["b"].offset_s - slots["a"].offset_s) % period
    assert gap == pytest.approx(period / 2, abs=2e-3)
    assert {v.alone_gbps for v in got.values()} == {100.0}
    assert all(v.priority is None for v in got.values())


def test_a_job_that_shares_no_link_gets_no_slot() -> None:
    jobs = [job("a", (0, 1), 0.2), job("b", (2, 3), 0.2)]
    got = phases("cassini", jobs, {"a": 0.3, "b": 0.3})
    assert got == {"a": LivePhase("a", 100.0), "b": LivePhase("b", 100.0)}


def test_the_period_covers_the_bursts_of_a_busy_link() -> None:
    # Each job alone iterates in 0.4 s, but the link carries 0.6 s of bursts per cycle.
    jobs = [job(k, (0, 1), 0.2) for k in "abc"]
    got = phases("cassini", jobs, dict.fromkeys("abc", 0.2))
    periods = {v.slot.period_s for v in got.values() if v.slot is not None}
    assert len(periods) == 1
    p = periods.pop()
    assert p == pytest.approx(0.6 * (1 + SLOT_HEADROOM), abs=1e-3)
    offsets = sorted(v.slot.offset_s for v in got.values() if v.slot is not None)
    gaps = [(offsets[(i + 1) % 3] - offsets[i]) % p for i in range(3)]
    assert gaps == [pytest.approx(p / 3, abs=2e-3)] * 3


def test_unequal_jobs_bursts_never_overlap_in_their_slots() -> None:
    # A long and a short burst on a shared NIC, and a third job chained through node 2:
    # a (0,1) and b (1,2) share node 1; c (2,3) shares node 2 with b.
    jobs = [job("a", (0, 1), 0.3), job("b", (1, 2), 0.1), job("c", (2, 3), 0.25)]
    compute = {"a": 0.2, "b": 0.5, "c": 0.3}
    got = phases("cassini", jobs, compute)
    slots = {k: v.slot for k, v in got.items()}
    assert all(s is not None for s in slots.values())
    period = {s.period_s for s in slots.values() if s is not None}
    assert len(period) == 1  # one group, one cycle
    p = period.pop()
    assert p >= 0.6 * (1 + SLOT_HEADROOM) - 1e-3  # b's iteration alone, the longest
    burst = {"a": 0.3, "b": 0.1, "c": 0.25}
    for x, y in (("a", "b"), ("b", "c")):
        sx, sy = slots[x], slots[y]
        assert sx is not None and sy is not None
        assert turns_overlap_s((sx.offset_s, burst[x]), (sy.offset_s, burst[y]), p) < 2e-3


def test_crux_gives_the_more_gpu_intense_job_the_higher_level() -> None:
    # Same bytes, but a computes 4 x 0.3 GPU-s per iteration, b 8 x 0.3: b is more intense.
    jobs = [job("a", (0, 1), 0.2, gpus=4), job("b", (0, 1), 0.2, gpus=8), job("c", (2, 3), 0.2)]
    got = phases("crux", jobs, dict.fromkeys("abc", 0.3))
    assert got["b"].priority is not None and got["a"].priority is not None
    assert got["b"].priority > got["a"].priority
    assert got["c"] == LivePhase("c", 100.0)  # alone: no level
    assert all(v.slot is None for v in got.values())


@pytest.mark.parametrize("network", ["mltcp", "fair"])
def test_a_phase_form_without_a_live_form_is_refused(network: str) -> None:
    with pytest.raises(ValueError, match="has no live form"):
        phases(network, [job("a", (0, 1), 0.2)], {"a": 0.3})


def test_the_same_jobs_get_the_same_slots() -> None:
    jobs = [job("a", (0, 1), 0.2), job("b", (0, 1), 0.15)]
    compute = {"a": 0.3, "b": 0.35}
    assert phases("cassini", jobs, compute) == phases("cassini", jobs[::-1], compute)
