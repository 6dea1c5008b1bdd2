"""The sharing model against the H200 measurements it is fitted on
(controller/model/profiles/h200-sharing), and its behaviour where none was measured."""

from __future__ import annotations

import math
import statistics

import pytest

from controller.model.sharing import (
    MPS_SM_BOUND,
    SHARING,
    SharingMode,
    Tenant,
    cap_factor,
    colocate,
    slowdown,
)
from tests.h200_sharing import PAIRS, Pair


def test_every_measured_pair_is_there() -> None:
    by_mode = {m: sorted({p.model for p in PAIRS if p.mode is m}) for m in SharingMode}
    assert by_mode[SharingMode.TIME_SLICING] == ["mlp", "resnet18", "resnet50", "transformer"]
    assert by_mode[SharingMode.MPS] == ["mlp", "resnet50", "transformer"]
    assert len(PAIRS) == 14


@pytest.mark.parametrize("mode", list(SharingMode))
def test_the_constants_are_the_fit_of_the_measurements(mode: SharingMode) -> None:
    rows = [p for p in PAIRS if p.mode is mode]
    saturated = [p.slowdown / (p.util + p.beside_util) for p in rows if p.util + p.beside_util >= 1]
    launch_bound = [(p.slowdown - 1) / (1 - p.util) for p in rows if p.util + p.beside_util < 1]
    overlap = math.exp(statistics.fmean(math.log(x) for x in saturated))
    assert SHARING[mode].overlap == pytest.approx(overlap, abs=5e-5)
    assert SHARING[mode].host == pytest.approx(statistics.fmean(launch_bound), abs=5e-5)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.mode}-{p.model}")
def test_each_measured_pair_within_five_percent(pair: Pair) -> None:
    predicted = slowdown(pair.mode, pair.util, pair.beside_util)
    assert predicted == pytest.approx(pair.slowdown, rel=0.05)


def test_mps_beats_time_slicing_for_compute_heavy_pairs_and_not_for_launch_bound_ones() -> None:
    mps, sliced = SharingMode.MPS, SharingMode.TIME_SLICING
    for util in (0.99, 0.73):
        assert slowdown(mps, util, util) < slowdown(sliced, util, util)
    # Launch-bound: the host side dominates, and the MPS server costs a little more.
    mlp = 0.064
    assert slowdown(SharingMode.MPS, mlp, mlp) > slowdown(SharingMode.TIME_SLICING, mlp, mlp)


def test_the_mps_cap_reproduces_the_capped_run() -> None:
    # Issue 27: ResNet-50 (u = 0.993) alone at 50 % of the SMs ran 1.46x slower.
    assert slowdown(SharingMode.MPS, 0.993, 0.0, fraction=0.5) == pytest.approx(1.46, abs=0.005)
    assert cap_factor(1.0) == 1.0
    assert cap_factor(0.25) == pytest.approx(1 - MPS_SM_BOUND + 4 * MPS_SM_BOUND)


@pytest.mark.parametrize("mode", list(SharingMode))
def test_alone_on_a_whole_gpu_is_exactly_no_slowdown(mode: SharingMode) -> None:
    for util in (0.064, 0.7, 0.95, 1.0):
        assert slowdown(mode, util, 0.0) == 1.0
    # Time-slicing enforces no share: a fraction alone costs nothing.
    assert slowdown(SharingMode.TIME_SLICING, 0.95, 0.0, fraction=0.3) == 1.0


@pytest.mark.parametrize("mode", list(SharingMode))
def test_an_idle_neighbour_costs_nearly_nothing_and_busier_ones_more(mode: SharingMode) -> None:
    assert slowdown(mode, 0.95, 1e-6) == pytest.approx(1.0, abs=1e-4)
    loads = [0.05, 0.2, 0.5, 0.9, 1.5, 2.5]
    slows = [slowdown(mode, 0.6, load) for load in loads]
    assert slows == sorted(slows) and len(set(slows)) == len(slows)


def test_colocate_fills_memory_in_order_and_sums_normalised_throughput() -> None:
    group = colocate(
        SharingMode.MPS, 20_000, [Tenant(0.99, 16_210), Tenant(0.99, 16_210), Tenant(0.06, 65)]
    )
    assert group.fits_memory == (True, False, True)
    assert group.throughput_gain == pytest.approx(sum(1 / s for s in group.slowdowns))
    # The GPU's demand is 2.04: everyone's step stretches with it, the light job's too
    # (a guess for mixed groups: docs/sharing.md).
    assert group.slowdowns[0] == group.slowdowns[1] == group.slowdowns[2] > 1.9
    alone = colocate(SharingMode.MPS, 20_000, [Tenant(0.99, 100, fraction=0.5)])
    assert alone.slowdowns == (slowdown(SharingMode.MPS, 0.99, 0.0, 0.5),)
    assert alone.throughput_gain == pytest.approx(1 / alone.slowdowns[0])
