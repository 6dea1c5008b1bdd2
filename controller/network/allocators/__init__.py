"""The policy registry and the one entry point: `allocate(policy, capacities, flows, coflows)`.

Called per event by a simulator: the job simulator gives each multi-node DL job's
flows a rate on the NIC and rack links they cross; the coflow replay calls the
array functions in `ALLOCATORS` directly on its numpy state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controller.network.allocators import aalo, fair, sincronia, varys
from controller.network.allocators.problem import FloatArray, FlowArrays, from_records
from controller.network.model import Coflow, Flow, FlowId, LinkId


@dataclass(frozen=True)
class NetworkPolicy:
    """`rates` maps arrays to Gbit/s per flow. `thresholds`, for policies whose
    decision changes with attained service, gives the attained MB at which each
    coflow's treatment changes next (a simulator schedules an event there)."""

    name: str
    rates: Callable[[FlowArrays], FloatArray]
    thresholds: Callable[[FloatArray], FloatArray] | None = None


def _aalo_strict(arrays: FlowArrays) -> FloatArray:
    return aalo.aalo_rates(arrays, aalo.AaloConfig(strict=True))


ALLOCATORS: dict[str, NetworkPolicy] = {
    fair.NAME: NetworkPolicy(fair.NAME, fair.fair_rates),
    varys.NAME: NetworkPolicy(varys.NAME, varys.sebf_rates),
    aalo.NAME: NetworkPolicy(aalo.NAME, aalo.aalo_rates, aalo.next_threshold_mb),
    "aalo-strict": NetworkPolicy("aalo-strict", _aalo_strict, aalo.next_threshold_mb),
    sincronia.NAME: NetworkPolicy(sincronia.NAME, sincronia.sincronia_rates),
}


class UnknownNetworkPolicyError(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown network policy {name!r} (known: {', '.join(ALLOCATORS)})")


def get_policy(name: str) -> NetworkPolicy:
    try:
        return ALLOCATORS[name]
    except KeyError:
        raise UnknownNetworkPolicyError(name) from None


def allocate(
    policy: str,
    capacities: Mapping[LinkId, float],
    flows: Sequence[Flow],
    coflows: Sequence[Coflow],
) -> dict[FlowId, float]:
    """Rate in Gbit/s for every flow, under `policy` (a name in `ALLOCATORS`).

    Every flow's coflow must be in `coflows`; every link a flow crosses must have a
    capacity. Rates never exceed a link's capacity and are work-conserving: each
    flow with bytes left crosses at least one full link. Flows with nothing left get 0.
    """
    chosen = get_policy(policy)
    live = [f for f in flows if f.remaining_mb > 0]
    arrays, positions = from_records(capacities, live, coflows)
    rates = chosen.rates(arrays)
    out: dict[FlowId, float] = {f.flow_id: 0.0 for f in flows}
    for pos, i in enumerate(positions):
        out[live[i].flow_id] = float(rates[pos])
    return out
