"""Placement: turning "job J on n GPUs" into a GPU set taken from a free pool.

Policies call a placer through `Snapshot.placer`; the simulator and the Kubernetes
backend choose which one with `make_placer` (names in `PLACERS`). Every placer keeps
gangs whole (a whole allocation or None) and never touches the pool it is given; the
wrapper `make_placer` puts around each (`resources.ResourceAwarePlacer`) is the one
place a running job keeps its GPUs when it keeps its size. See docs/placement.md.

- `basic`: `consolidated` (best fit, fewest nodes, one rack), `first-fit`, `random`,
  and `packed_allocation`, the reference placement for nominal speeds;
- `subsets`: the best GPU subsets of one node, cached per node type;
- `topology`: `topology-aware`, scored by the performance model's iteration time;
- `fragmentation`: `fragmentation-aware` (FGD) and the fragmentation measures the
  simulator records after each round;
- `resources`: CPU, host memory and GPU models for all of them (`make_placer` wraps
  each in `ResourceAwarePlacer`).

The placer that chooses a GPU type around any of them, `FastestTypePlacer`, lives in
controller.model.gpu_choice.gpu_type, where the policies that choose types reach it too.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.model import Cluster, Placer
from controller.placement.basic import (
    ConsolidatedPlacer,
    FirstFitPlacer,
    RandomPlacer,
    packed_allocation,
    sticky_allocation,
)
from controller.placement.fragmentation import (
    FragmentationAwarePlacer,
    WorkloadMix,
    fragmentation,
    share_fraction,
    unallocatable_idle_gpus,
)
from controller.placement.resources import ResourceAwarePlacer, host_never_fits
from controller.placement.topology import TopologyAwarePlacer

__all__ = [
    "PLACERS",
    "ConsolidatedPlacer",
    "FirstFitPlacer",
    "FragmentationAwarePlacer",
    "RandomPlacer",
    "ResourceAwarePlacer",
    "TopologyAwarePlacer",
    "UnknownPlacerError",
    "WorkloadMix",
    "fragmentation",
    "host_never_fits",
    "make_placer",
    "packed_allocation",
    "share_fraction",
    "sticky_allocation",
    "unallocatable_idle_gpus",
]

PLACERS: dict[str, Callable[[Cluster, int], Placer]] = {
    "consolidated": lambda cluster, seed: ConsolidatedPlacer(cluster),
    "first-fit": lambda cluster, seed: FirstFitPlacer(cluster),
    "fragmentation-aware": lambda cluster, seed: FragmentationAwarePlacer(cluster),
    "random": lambda cluster, seed: RandomPlacer(cluster, seed),
    "topology-aware": lambda cluster, seed: TopologyAwarePlacer(cluster),
}


class UnknownPlacerError(ValueError):
    pass


def make_placer(name: str, cluster: Cluster, seed: int = 0) -> ResourceAwarePlacer:
    """The placer `name` (one of `PLACERS`), respecting every resource a job asks."""
    try:
        factory = PLACERS[name]
    except KeyError:
        known = ", ".join(sorted(PLACERS))
        raise UnknownPlacerError(f"unknown placement {name!r} (known: {known})") from None
    return ResourceAwarePlacer(factory(cluster, seed), cluster)
