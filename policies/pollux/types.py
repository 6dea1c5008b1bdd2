"""Pollux on a cluster of several GPU types: each job's goodput per type, as Sia
(Jayaram Subramanya et al., "Sia: Heterogeneity-aware, goodput-optimized ML-cluster
scheduling", SOSP 2023) evaluates a job's goodput for each GPU type's configurations.

Called by `policies.pollux.Pollux` each round when it is aware of types (`aware`, the
default) and the cluster has more than one. `type_split` cuts the cluster into one
cluster per GPU type (its nodes alone; racks and groups kept, so links and uplinks
are the same), on which `policies.pollux.goodput` builds each job's goodput table as it
does for the whole cluster: the compute probe runs on that type's GPUs, T_sync on its
nodes. `typed_tables` turns those into the job's slots of the search's speedup table
(`policies.pollux.search.Problem`): one per type, read for a row whose GPUs are all of
that type, and one more for a row that spans types: the whole cluster's table (what
Pollux blind to types computes) scaled by the job's one-GPU goodput on the slowest
type it holds over the whole cluster's probe (`type_factor`), since a job on GPUs of
several types runs at its slowest GPU's speed (Gavel §3.1; Sia allows no such row).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from controller.model import Cluster
from controller.model.gpu_choice.gpu_type import nodes_by_type

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
States = npt.NDArray[np.float32]
# A job's goodput table and best batches on a cluster, for up to so many GPUs
# (policies.pollux.goodput.goodput_table with the job's arguments).
TableOf = Callable[[Cluster, int], tuple[FloatArray, IntArray]]


@dataclass(frozen=True)
class TypeSplit:
    """The cluster's GPU types (by name), each type's nodes as a cluster of their own,
    and which type each node is (`onehot[node, type]`)."""

    names: tuple[str, ...]
    clusters: tuple[Cluster, ...]
    onehot: States  # (nodes, types)


# One split per cluster object, as pollux_goodput keeps its tables: the per-type
# clusters must be the same objects from round to round for its caches to hold. A
# backend builds a new cluster only when its nodes change; the last few are kept.
_splits: dict[int, tuple[Cluster, TypeSplit | None]] = {}
SPLITS_KEPT = 8


def type_split(cluster: Cluster) -> TypeSplit | None:
    """The cluster cut by GPU type; None for a cluster of one type."""
    entry = _splits.get(id(cluster))
    if entry is not None and entry[0] is cluster:
        return entry[1]
    by_type = nodes_by_type(cluster)
    split = None
    if len(by_type) > 1:
        names = tuple(by_type)
        clusters = tuple(
            Cluster(
                f"{cluster.name}/{name}",
                tuple(n for i, n in enumerate(cluster.nodes) if i in by_type[name]),
                cluster.racks,
                cluster.groups,
            )
            for name in names
        )
        onehot = np.zeros((len(cluster.nodes), len(names)), np.float32)
        for column, name in enumerate(names):
            onehot[sorted(by_type[name]), column] = 1.0
        onehot.setflags(write=False)
        split = TypeSplit(names, clusters, onehot)
    _splits[id(cluster)] = (cluster, split)
    while len(_splits) > SPLITS_KEPT:
        del _splits[next(iter(_splits))]
    return split


@dataclass(frozen=True)
class TypedTables:
    """One job's slots of the speedup table: `speedup[slot, n, k]` for each type and
    then a row spanning types; `factor[type]` its one-GPU goodput on the type over the
    whole cluster's; `best[slot]` the batch reaching the goodput, with the cluster
    whose table it is."""

    speedup: FloatArray  # (types + 1, ndim, kdim)
    factor: FloatArray  # (types,)
    best: tuple[tuple[Cluster, IntArray], ...]


def typed_tables(
    split: TypeSplit,
    whole: Cluster,
    table: TableOf,
    k_fair: int,
    ndim: int,
    kdim: int,
) -> TypedTables:
    """A job's slots (`TypedTables`) from `table(cluster, max_gpus)`: its goodput table
    and best batches on a cluster (policies.pollux.goodput.goodput_table for the job).
    Speedups are over the best type's goodput at the fair share `k_fair` (on as few
    of the type's nodes as hold it), so that a job that gains much from a fast type
    counts its slow types as small speedups and one that gains little does not."""
    tables = [table(c, min(kdim - 1, c.num_gpus)) for c in split.clusters]
    blind, blind_best = table(whole, kdim - 1)
    references = []
    for cluster, (goodput, _) in zip(split.clusters, tables, strict=True):
        if k_fair <= cluster.num_gpus:
            by_size = np.cumsum(sorted((n.num_gpus for n in cluster.nodes), reverse=True))
            n_fair = min(int(np.searchsorted(by_size, k_fair)) + 1, k_fair)
            references.append(float(goodput[n_fair, k_fair]))
    reference = max(references, default=0.0)
    if reference <= 0.0:
        reference = max(float(g.max()) for g in (*(g for g, _ in tables), blind)) or 1.0
    speedup = np.zeros((len(tables) + 1, ndim, kdim))
    for slot, (goodput, _) in enumerate(tables):
        part = goodput[:ndim, :kdim]
        speedup[slot, : part.shape[0], : part.shape[1]] = part / reference
    speedup[-1] = blind[:ndim, :kdim] / reference
    one = float(blind[1, 1]) if blind.shape[0] > 1 and blind.shape[1] > 1 else 0.0
    factor = np.array(
        [float(g[1, 1]) / one if one > 0.0 and g.shape[1] > 1 else 1.0 for g, _ in tables]
    )
    best = (
        *((c, b) for c, (_, b) in zip(split.clusters, tables, strict=True)),
        (whole, blind_best),
    )
    return TypedTables(speedup, factor, best)


def row_slot(split: TypeSplit, row: States) -> int:
    """The slot of a row of per-node GPU counts: its type where it holds one, the
    spanning slot (the last) where several."""
    held = (np.minimum(row, 1.0) @ split.onehot) > 0.5
    types = np.flatnonzero(held)
    return int(types[0]) if types.size == 1 else len(split.names)
