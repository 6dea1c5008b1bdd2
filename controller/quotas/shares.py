"""Each queue's fair share of the cluster this round: guarantees first, the rest by weight.

Called by controller.quotas.admission at every round, with the GPUs each leaf holds
and asks for. At each level of the tree the capacity the parent has (the cluster's
GPUs at the top) is divided among its children by water-filling:

1. every child gets its guarantee, or its demand if smaller (a queue never gets
   more than it could use);
2. what is left goes to the children whose demand is not met, in proportion to
   their weights, each capped at its demand and its limit; a child that reaches its
   cap hands the rest of its part back to the others, until nothing is left or every
   demand is met.

If the guarantees asked for do not fit the capacity (nodes are down, or the guarantees
add up to more than the cluster), step 1 gives each child the same fraction of what
it asks. The result, a child's *deserved* GPUs, is then divided among its own children
the same way. A queue's demand is the GPUs its jobs hold plus those its waiting jobs
ask for, capped by its limit; an inner queue's is the sum of its children's, capped
by its own limit. This is Volcano's proportion plugin (deserved = guarantee, then the
remainder by weight, capped by request and capability) and KAI's over-quota weight,
applied level by level as KAI does for its hierarchy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.model.quotas import ANY_MODEL, GpuQuota, QuotaNode, QuotaTree
from controller.model.quotas.room import EPS_GPUS


@dataclass(frozen=True, slots=True)
class Claim:
    """What one queue brings to the division: its guarantee, its cap (demand within
    its limit) and its weight."""

    guarantee: float
    cap: float
    weight: float


def divide(capacity: float, claims: Mapping[str, Claim]) -> dict[str, float]:
    """Water-fill `capacity` among `claims` (steps 1 and 2 of the module docstring)."""
    base = {name: min(c.guarantee, c.cap) for name, c in claims.items()}
    asked = sum(base.values())
    if asked >= capacity - EPS_GPUS:
        scale = capacity / asked if asked > 0 else 0.0
        return {name: g * min(1.0, scale) for name, g in base.items()}
    give = dict(base)
    left = capacity - asked
    open_ = {n for n, c in claims.items() if give[n] < c.cap - EPS_GPUS}
    while left > EPS_GPUS and open_:
        weights = sum(claims[n].weight for n in open_)
        for name in sorted(open_):
            give[name] = min(claims[name].cap, give[name] + left * claims[name].weight / weights)
        left = capacity - sum(give.values())
        open_ = {n for n in open_ if give[n] < claims[n].cap - EPS_GPUS}
    return give


def deserved_gpus(
    tree: QuotaTree,
    capacity_gpus: float,
    demand_gpus: Mapping[str, float],
    model: str = ANY_MODEL,
) -> dict[str, float]:
    """Every queue's deserved GPUs, given each leaf's demand (absent leaves: none),
    with the guarantees and limits of GPU `model` (ANY_MODEL: each quota's total)."""

    def amount(quota: GpuQuota) -> float:
        return float(quota.total if model == ANY_MODEL else quota.get(model))

    demand: dict[str, float] = {}

    def total(node: QuotaNode) -> float:
        own = (
            demand_gpus.get(node.name, 0.0)
            if node.leaf
            else sum(total(child) for child in node.children)
        )
        if node.limit is not None:
            own = min(own, amount(node.limit))
        demand[node.name] = own
        return own

    for root in tree.roots:
        total(root)
    out: dict[str, float] = {}

    def split(capacity: float, nodes: tuple[QuotaNode, ...]) -> None:
        claims = {n.name: Claim(amount(n.guarantee), demand[n.name], n.weight) for n in nodes}
        for node in nodes:
            out[node.name] = 0.0
        for name, gpus in divide(capacity, claims).items():
            out[name] = gpus
        for node in nodes:
            if node.children:
                split(out[node.name], node.children)

    split(capacity_gpus, tree.roots)
    return out
