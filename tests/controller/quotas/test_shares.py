"""Fair shares (controller.quotas.shares): guarantees first, then the rest by weight."""

from __future__ import annotations

import pytest

from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.quotas.shares import Claim, deserved_gpus, divide

INF = float("inf")


@pytest.mark.parametrize(
    ("capacity", "claims", "expected"),
    [
        # Guarantees, then the rest evenly at equal weights.
        (100, {"a": Claim(50, INF, 1), "b": Claim(30, INF, 1)}, {"a": 60, "b": 40}),
        # Nothing guaranteed: the whole by weight, 1 : 3.
        (100, {"a": Claim(0, INF, 1), "b": Claim(0, INF, 3)}, {"a": 25, "b": 75}),
        # A queue capped by its demand hands the rest of its part to the others.
        (100, {"a": Claim(10, 20, 1), "b": Claim(10, INF, 1)}, {"a": 20, "b": 80}),
        # A guarantee is only served up to the demand.
        (100, {"a": Claim(50, 10, 1), "b": Claim(50, INF, 1)}, {"a": 10, "b": 90}),
        # Guarantees beyond the capacity (nodes down): the same fraction of each.
        (60, {"a": Claim(50, INF, 1), "b": Claim(25, INF, 1)}, {"a": 40, "b": 20}),
        # Every demand met: the rest stays idle.
        (100, {"a": Claim(10, 5, 1), "b": Claim(10, 30, 2)}, {"a": 5, "b": 30}),
        # Three-way water-filling: c's cap binds on the second pass.
        (
            90,
            {"a": Claim(0, INF, 1), "b": Claim(0, INF, 1), "c": Claim(0, 12, 4)},
            {"a": 39, "b": 39, "c": 12},
        ),
    ],
)
def test_divide(capacity: float, claims: dict[str, Claim], expected: dict[str, float]) -> None:
    got = divide(capacity, claims)
    assert got == pytest.approx(expected)


def leaf(name: str, guarantee: int, weight: float = 1.0, limit: int | None = None) -> QuotaNode:
    return QuotaNode(
        name,
        GpuQuota.of(guarantee),
        None if limit is None else GpuQuota.of(limit),
        weight,
    )


def tree(y_limit: int | None = None) -> QuotaTree:
    org = QuotaNode("org", GpuQuota.of(30), children=(leaf("x", 20), leaf("y", 10, limit=y_limit)))
    return QuotaTree((org, leaf("z", 30)))


@pytest.mark.parametrize(
    ("y_limit", "demand", "expected"),
    [
        # z has nothing to run: org takes all 100; x and y split its 70 past their
        # guarantees evenly.
        (None, {"x": 100, "y": 100}, {"org": 100, "x": 55, "y": 45, "z": 0}),
        # z wants everything: the roots split 40 past the guarantees evenly.
        (None, {"x": 100, "y": 100, "z": 100}, {"org": 50, "x": 30, "y": 20, "z": 50}),
        # y's limit caps it; x takes the rest of org's share.
        (15, {"x": 100, "y": 100}, {"org": 100, "x": 85, "y": 15, "z": 0}),
        # Demand below the guarantee: only the demand.
        (None, {"x": 5, "z": 100}, {"org": 5, "x": 5, "y": 0, "z": 95}),
    ],
)
def test_deserved_gpus_level_by_level(
    y_limit: int | None, demand: dict[str, float], expected: dict[str, float]
) -> None:
    assert deserved_gpus(tree(y_limit), 100.0, demand) == pytest.approx(expected)
