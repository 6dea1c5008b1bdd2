"""The pool of free capacity that allocations (controller.model.allocation) are taken
from: whole GPUs per node, shares of packed GPUs, and each node's CPU and memory.

A policy takes a `GpuPool` from its snapshot, tries placements against it with the
snapshot's placer, and keeps what fits: the pool is a scratch copy, so a failed
gang attempt costs nothing (Volcano's statement, committed or discarded whole). The
simulator keeps one for the cluster (controller.sim), taken from and given back to as
jobs start and stop.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable

from controller.model.allocation import SHARE_EPS, Allocation, GpuShare
from controller.model.cluster import NO_HOST, UNCONSTRAINED, Cluster, HostRequest


class GpuPool:
    """Free capacity: whole free GPUs per node, and the used part of shared GPUs.

    Nodes are also bucketed by their number of whole free GPUs so that best-fit
    placement finds a node in O(GPUs per node) rather than O(nodes).

    A cordoned node offers no free GPU (`cordon`): its free GPUs are fenced, out of
    `free_gpus`, the buckets and `total_free`, so that no placer chooses them, and no
    new share goes on its shared GPUs (`share_fits`). A fenced GPU can still be taken
    by naming it (`fits`, `take`): a policy that releases a running job and places it
    again gets its own GPUs back (`sticky_allocation`); a plan that gives fenced GPUs
    to another job is refused by controller.actions.compile_plan.
    """

    __slots__ = (
        "_cordoned",
        "_cpu_free",
        "_fenced",
        "_free",
        "_host_mem_free",
        "_mem_cap",
        "_shared_frac",
        "_shared_mem",
        "buckets",
        "total_free",
    )

    def __init__(
        self,
        gpus_per_node: Iterable[int],
        mem_mib_per_node: Iterable[int],
        down: Iterable[int] = (),
        cordoned: Iterable[int] = (),
        host_capacity: Iterable[HostRequest | None] = (),
    ) -> None:
        counts = list(gpus_per_node)
        # Free CPU and host memory per node, kept only when some node reports them:
        # a pool of GPUs alone (every replay without CPU requests) costs nothing more.
        caps = list(host_capacity)
        self._cpu_free: list[int] | None = None
        self._host_mem_free: list[int] | None = None
        if any(c is not None for c in caps):
            caps += [None] * (len(counts) - len(caps))
            self._cpu_free = [UNCONSTRAINED if c is None else c.cpu_milli for c in caps]
            self._host_mem_free = [UNCONSTRAINED if c is None else c.mem_mib for c in caps]
        down_set = set(down)
        self._free: list[list[int]] = [
            [] if i in down_set else list(range(n)) for i, n in enumerate(counts)
        ]
        self._mem_cap = list(mem_mib_per_node)
        self._shared_frac: dict[tuple[int, int], float] = {}
        self._shared_mem: dict[tuple[int, int], int] = {}
        self.buckets: list[set[int]] = [set() for _ in range(max(counts, default=0) + 1)]
        for i, free in enumerate(self._free):
            if i not in down_set:
                self.buckets[len(free)].add(i)
        self.total_free = sum(len(f) for f in self._free)
        self._cordoned: set[int] = set()
        self._fenced: set[tuple[int, int]] = set()  # free GPUs of cordoned nodes
        for node in cordoned:
            self.cordon(node)

    @classmethod
    def of_cluster(
        cls, cluster: Cluster, down: Iterable[int] = (), cordoned: Iterable[int] = ()
    ) -> GpuPool:
        """The whole cluster free: its GPUs, their memory, and each node's CPU and
        memory where the node states them (`Node.host`)."""
        return cls(
            cluster.gpus_per_node,
            (n.gpu_type.mem_mib for n in cluster.nodes),
            down,
            cordoned,
            (n.host for n in cluster.nodes),
        )

    def copy(self) -> GpuPool:
        new = GpuPool.__new__(GpuPool)
        new._cordoned = set(self._cordoned)
        new._cpu_free = None if self._cpu_free is None else list(self._cpu_free)
        new._host_mem_free = None if self._host_mem_free is None else list(self._host_mem_free)
        new._fenced = set(self._fenced)
        new._free = list(map(list, self._free))  # map: no Python frame per node
        new._mem_cap = self._mem_cap
        new._shared_frac = dict(self._shared_frac)
        new._shared_mem = dict(self._shared_mem)
        new.buckets = list(map(set, self.buckets))
        new.total_free = self.total_free
        return new

    @property
    def num_nodes(self) -> int:
        return len(self._free)

    def free_gpus(self, node: int) -> list[int]:
        """Whole free GPUs of a node, lowest index first (do not mutate)."""
        return self._free[node]

    def shared_gpus(self) -> dict[tuple[int, int], float]:
        """Partly used GPUs and the fraction in use."""
        return self._shared_frac

    @property
    def cordoned(self) -> frozenset[int]:
        return frozenset(self._cordoned)

    @property
    def tracks_host(self) -> bool:
        """Whether some node's CPU or host memory is limited."""
        return self._cpu_free is not None

    def host_free(self, node: int) -> HostRequest | None:
        """The node's free CPU and host memory, None when unlimited."""
        if self._cpu_free is None or self._host_mem_free is None:
            return None
        return HostRequest(self._cpu_free[node], self._host_mem_free[node])

    def host_fits(self, node: int, host: HostRequest) -> bool:
        """Whether one more pod asking `host` fits the node's free CPU and memory."""
        if self._cpu_free is None or self._host_mem_free is None or host == NO_HOST:
            return True
        return self._cpu_free[node] >= host.cpu_milli and self._host_mem_free[node] >= host.mem_mib

    def share_fits(self, node: int, gpu: int, fraction: float, mem_mib: int) -> bool:
        """Whether a new share of (node, gpu) fits next to the ones already on it
        (never on a cordoned node: placers ask this to find room for a new share)."""
        if self._cordoned and node in self._cordoned:
            return False
        return self._share_fits(node, gpu, fraction, mem_mib)

    def _share_fits(self, node: int, gpu: int, fraction: float, mem_mib: int) -> bool:
        key = (node, gpu)
        if key in self._shared_frac:
            return (
                self._shared_frac[key] + fraction <= 1.0 + SHARE_EPS
                and self._shared_mem[key] + mem_mib <= self._mem_cap[node]
            )
        return self._whole_free(node, gpu) and mem_mib <= self._mem_cap[node]

    def _whole_free(self, node: int, gpu: int) -> bool:
        """Wholly free, offered or fenced."""
        return gpu in self._free[node] or (bool(self._fenced) and (node, gpu) in self._fenced)

    def fits(self, alloc: Allocation, mem_mib: int | None) -> bool:
        if not alloc.shared and not self._fenced and not self._shared_frac:
            # Whole GPUs, none fenced or packed: each must be on its node's free list
            # (a policy's test of a stopped job's own GPUs, several times a round).
            free = self._free
            for node, gpu, _ in alloc.shares:
                if gpu not in free[node]:
                    return False
        else:
            mem = self._mem_cap_or(mem_mib)
            if not all(self._fits_share(s, mem) for s in alloc.shares):
                return False
        return alloc.host == NO_HOST or all(self.host_fits(n, alloc.host) for n in alloc.nodes)

    def _mem_cap_or(self, mem_mib: int | None) -> int:
        return 0 if mem_mib is None else mem_mib

    def _fits_share(self, s: GpuShare, mem: int) -> bool:
        if s.fraction >= 1.0:
            return self._whole_free(s.node, s.gpu) and (s.node, s.gpu) not in self._shared_frac
        return self._share_fits(s.node, s.gpu, s.fraction, mem)

    def take(self, alloc: Allocation, mem_mib: int | None = None) -> None:
        """Remove an allocation's shares from the pool; raises if any does not fit."""
        if not self.fits(alloc, mem_mib):
            raise ValueError(f"allocation {alloc.gpus()} does not fit the free GPUs")
        self.claim(alloc, mem_mib)

    def claim(self, alloc: Allocation, mem_mib: int | None = None) -> None:
        """`take` without its fit check, for an allocation already known to fit: the
        starts of a plan `compile_plan` accepted (the simulator carries them out), a
        job's own GPUs just tested with `fits`. A whole GPU that is not free still
        raises (ValueError from the free list); a share is not checked."""
        if self._cpu_free is not None:
            self._add_host(alloc, -1)
        if not alloc.shared:  # whole GPUs: every start in a replay without packing
            if self._fenced:
                remove = self._remove_whole
                for node, gpu, _ in alloc.shares:
                    remove(node, gpu)
            else:
                self._claim_whole(alloc.shares)
            return
        mem = self._mem_cap_or(mem_mib)
        for s in alloc.shares:
            key = (s.node, s.gpu)
            if s.fraction >= 1.0:
                self._remove_whole(s.node, s.gpu)
            elif key in self._shared_frac:
                self._shared_frac[key] += s.fraction
                self._shared_mem[key] += mem
            else:
                self._remove_whole(s.node, s.gpu)
                self._shared_frac[key] = s.fraction
                self._shared_mem[key] = mem

    def release(self, alloc: Allocation, mem_mib: int | None = None) -> None:
        """Give an allocation's shares back to the pool."""
        if self._cpu_free is not None:
            self._add_host(alloc, 1)
        if not alloc.shared:
            if self._fenced or self._cordoned:
                add = self._add_whole
                for node, gpu, _ in alloc.shares:
                    add(node, gpu)
            else:
                self._release_whole(alloc.shares)
            return
        mem = self._mem_cap_or(mem_mib)
        for s in alloc.shares:
            key = (s.node, s.gpu)
            if s.fraction >= 1.0 or key not in self._shared_frac:
                self._add_whole(s.node, s.gpu)
                continue
            left = self._shared_frac[key] - s.fraction
            if left <= SHARE_EPS:
                del self._shared_frac[key]
                del self._shared_mem[key]
                self._add_whole(s.node, s.gpu)
            else:
                self._shared_frac[key] = left
                self._shared_mem[key] -= mem

    def hold_host(self, alloc: Allocation) -> None:
        """Take the allocation's CPU and memory on its nodes without checking them: a
        running job's pods hold theirs even where a node's allocatable shrank."""
        self._add_host(alloc, -1)

    def _add_host(self, alloc: Allocation, sign: int) -> None:
        """Give back (sign 1) or take (-1) the allocation's CPU and memory per node."""
        cpu, mem = self._cpu_free, self._host_mem_free
        if cpu is None or mem is None or alloc.host == NO_HOST:
            return
        for node in alloc.nodes:
            cpu[node] += sign * alloc.host.cpu_milli
            mem[node] += sign * alloc.host.mem_mib

    def node_down(self, node: int) -> None:
        """Withdraw a node's free GPUs (its jobs must have been released first)."""
        for gpu in list(self._free[node]):
            self._remove_whole(node, gpu)
        self._fenced.difference_update([k for k in self._fenced if k[0] == node])
        self.buckets[0].discard(node)

    def node_up(self, node: int, num_gpus: int) -> None:
        """Return a recovered node's GPUs, all free."""
        self.buckets[0].add(node)
        for gpu in range(num_gpus):
            self._add_whole(node, gpu)

    def cordon(self, node: int) -> None:
        """Offer none of the node's GPUs from now on: fence the free ones, and those
        released later (a down node stays down)."""
        if node in self._cordoned:
            return
        for gpu in list(self._free[node]):
            self._remove_whole(node, gpu)
            self._fenced.add((node, gpu))
        self._cordoned.add(node)

    def uncordon(self, node: int) -> None:
        """Offer the node's fenced GPUs again."""
        if node not in self._cordoned:
            return
        self._cordoned.discard(node)
        for key in sorted(k for k in self._fenced if k[0] == node):
            self._fenced.discard(key)
            self._add_whole(*key)

    def _claim_whole(self, shares: tuple[GpuShare, ...]) -> None:
        """`_remove_whole` of each GPU, on no fenced node, with each node's bucket
        moved once (shares are sorted by node); a GPU not free raises ValueError."""
        free_of, buckets = self._free, self.buckets
        node = shares[0].node
        free = free_of[node]
        buckets[len(free)].discard(node)
        for n, gpu, _ in shares:
            if n != node:
                buckets[len(free)].add(node)
                node, free = n, free_of[n]
                buckets[len(free)].discard(node)
            free.remove(gpu)
        buckets[len(free)].add(node)
        self.total_free -= len(shares)

    def _release_whole(self, shares: tuple[GpuShare, ...]) -> None:
        """`_add_whole` of each GPU, on no fenced or cordoned node, with each node's
        bucket moved once; a GPU already free raises ValueError."""
        free_of, buckets = self._free, self.buckets
        node = shares[0].node
        free = free_of[node]
        buckets[len(free)].discard(node)
        for n, gpu, _ in shares:
            if n != node:
                buckets[len(free)].add(node)
                node, free = n, free_of[n]
                buckets[len(free)].discard(node)
            if gpu in free:
                raise ValueError(f"GPU {n}/{gpu} released twice")
            insort(free, gpu)
        buckets[len(free)].add(node)
        self.total_free += len(shares)

    def _remove_whole(self, node: int, gpu: int) -> None:
        if self._fenced and (node, gpu) in self._fenced:
            self._fenced.discard((node, gpu))
            return
        free = self._free[node]
        self.buckets[len(free)].discard(node)
        free.remove(gpu)
        self.buckets[len(free)].add(node)
        self.total_free -= 1

    def _add_whole(self, node: int, gpu: int) -> None:
        free = self._free[node]
        if gpu in free or (self._fenced and (node, gpu) in self._fenced):
            raise ValueError(f"GPU {node}/{gpu} released twice")
        if self._cordoned and node in self._cordoned:
            self._fenced.add((node, gpu))
            return
        self.buckets[len(free)].discard(node)
        insort(free, gpu)
        self.buckets[len(free)].add(node)
        self.total_free += 1
