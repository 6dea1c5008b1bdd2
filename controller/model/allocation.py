"""Allocations: the GPUs (whole, or shares of packed GPUs) one job holds.

Made by the placers and the policies, carried by plans and job views, taken from and
given back to the pool of free capacity (controller.model.pool).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from controller.model.cluster import NO_HOST, HostRequest

# Shares of one GPU may add up to 1 within this tolerance (float sums of thirds etc.).
SHARE_EPS = 1e-9


class GpuShare(NamedTuple):
    """A share of one GPU: `fraction` of its compute (an MPS thread percentage)."""

    node: int
    gpu: int
    fraction: float = 1.0


@dataclass(frozen=True)
class Allocation:
    """The GPUs one job holds: a gang, placed and released as a whole."""

    shares: tuple[GpuShare, ...]
    # CPU and memory the job's pod takes on each of its nodes (set by the placers and
    # by compile_plan from the job's spec); not part of equality: the GPUs say where.
    host: HostRequest = field(default=NO_HOST, compare=False)

    def __post_init__(self) -> None:
        if not self.shares:
            raise ValueError("an allocation holds at least one GPU share")
        keys = [(s.node, s.gpu) for s in self.shares]
        if len(set(keys)) != len(keys):
            raise ValueError("an allocation names each GPU once")
        for s in self.shares:
            if not 0.0 < s.fraction <= 1.0:
                raise ValueError(f"GPU share fraction must be in (0, 1], got {s.fraction}")
        object.__setattr__(self, "shares", tuple(sorted(self.shares)))

    @classmethod
    def whole(cls, gpus: Iterable[tuple[int, int]]) -> Allocation:
        """Whole GPUs, given as (node, GPU) tuples.

        Every placement a placer makes comes through here (a replay at load makes
        one per job started, several per round), so it skips the checks
        `__post_init__` makes of any shares: a whole GPU's fraction is 1, and each
        GPU's share is made once per process (`_WholeShares`)."""
        shares = tuple(sorted(map(_whole_share, gpus)))
        if not shares:
            raise ValueError("an allocation holds at least one GPU share")
        if len(set(shares)) != len(shares):
            raise ValueError("an allocation names each GPU once")
        alloc: Allocation = _new(cls)
        _set(alloc, "shares", shares)
        _set(alloc, "host", NO_HOST)
        # What the cached properties would compute, known here (a sum of 1.0s is
        # exact): the policies, the pool and the rate model read them at once.
        cached = alloc.__dict__
        cached["num_gpus"] = len(shares)
        cached["gpu_weight"] = float(len(shares))
        cached["shared"] = False
        return alloc

    def with_host(self, host: HostRequest) -> Allocation:
        """These GPUs with `host` taken on each of their nodes."""
        return self if host == self.host else Allocation(self.shares, host)

    def __iter__(self) -> Iterator[GpuShare]:
        return iter(self.shares)

    @cached_property
    def num_gpus(self) -> int:
        return len(self.shares)

    @cached_property
    def gpu_weight(self) -> float:
        """GPUs held, counting a shared GPU by its fraction."""
        return sum(s.fraction for s in self.shares)

    @cached_property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({s.node for s in self.shares}))

    @cached_property
    def per_node(self) -> tuple[tuple[int, int], ...]:
        """(node, GPUs on it), by node."""
        counts: dict[int, int] = {}
        for s in self.shares:
            counts[s.node] = counts.get(s.node, 0) + 1
        return tuple(sorted(counts.items()))

    @cached_property
    def shared(self) -> bool:
        return any(s.fraction < 1.0 for s in self.shares)

    def gpus(self) -> tuple[tuple[int, int], ...]:
        return tuple((s.node, s.gpu) for s in self.shares)


class _WholeShares(dict[tuple[int, int], GpuShare]):
    """The whole share of each GPU named so far, by (node, GPU): at most one entry
    per GPU of the clusters a process replays."""

    def __missing__(self, gpu: tuple[int, int]) -> GpuShare:
        node, index = gpu
        share = self[gpu] = GpuShare(node, index)
        return share


_whole_share = _WholeShares().__getitem__
_new = object.__new__
_set = object.__setattr__  # a frozen dataclass's fields are set so, as its __init__ does
