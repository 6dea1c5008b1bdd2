"""What the GPU-choice filter allows each job, as the genetic search's limits.

Called by `policies.pollux.Pollux` when it poses a round's search
(`policies.pollux.search.Problem`): `cell_caps` is the per-job node mask, `quota_bounds`
the quotas' upper bounds. Both are read off the filter's own rules
(controller.model.gpu_choice.candidates and controller.model.quotas.room), so that the
search spends its individuals on allocations the filter (`policies.pollux.place.filtered`,
still the authority) then grants, instead of cells it refuses.

Node mask (`cell_caps`): job j may be given new GPUs on node n unless the filter's
per-node rules fence n for it (`candidates.pool_for`: a GPU model it refuses, a
cordoned node, a node without the CPU or memory free for one of its pods, counted
with every searched job's GPUs released, as `filtered` counts them). A fenced cell is
capped at what the job holds there now (it may keep it); an open one at the node's
capacity.

Quota bounds (`quota_bounds`), per pool of the round's figures (one, or one per GPU
model) and counted over the pool's nodes, from `QuotaUse.evaluate`'s rule:

- a queue with a limit: its jobs' GPUs after the round at most limit - held + what
  they hold now. Evaluate adds every allowed gain to the chain's holdings after the
  plan's releases are taken off them, so the chain's net growth must fit what the
  limit leaves: exact for the check after the policy, which counts every release
  first (a quota at its limit may swap one of its jobs for another).
- a leaf: its jobs' GPUs after the round at most what they hold now + its headroom
  (deserved - held) + the pool's spare GPUs. Evaluate lets the leaf's gains use its
  headroom plus what the plan releases of its jobs (credit) as its own and borrow the
  rest from the spare GPUs, so gains - releases = net growth within headroom + spare
  is needed for the leaf's gains to pass. It is not enough where several leaves
  borrow the same spare GPUs in one round (their sum is not bounded here) or where
  `filtered` grants a job's gain before it sees the release that pays for it; the
  filter refuses those, as before. The gang rule of `within_share` (a gang passing
  its share by less than it was short) allows more than this bound: conservative.
- a job with no leaf (`NoQueue`): no gain at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.model import NO_HOST, Allocation, JobView, Reason, Snapshot
from controller.model.gpu_choice.candidates import pool_for, refusal
from controller.model.pool import GpuPool
from controller.model.quotas.room import QuotaRoom
from policies.pollux.search import QuotaBounds, States


def needs_limits(snapshot: Snapshot, views: Sequence[JobView]) -> bool:
    """Whether the filter could refuse anything this round (else the search runs
    as it always did: most rounds of most replays)."""
    return bool(
        snapshot.cordoned_nodes
        or snapshot.quota_room is not None
        or any(v.spec.host != NO_HOST or v.spec.gpu_models for v in views)
    )


def cell_caps(
    snapshot: Snapshot, views: Sequence[JobView], capacity: States, base: States
) -> States:
    """(jobs, nodes): the most GPUs each job may hold on each node (module docstring)."""
    pool = _released(snapshot, views)
    caps = np.repeat(capacity[None, :], len(views), axis=0)
    for row, view in enumerate(views):
        fenced = pool_for(snapshot, pool, view.spec).cordoned
        if fenced:
            cols = np.array(sorted(fenced), dtype=np.int64)
            caps[row, cols] = np.minimum(capacity[cols], base[row, cols])
    return caps


def _released(snapshot: Snapshot, views: Sequence[JobView]) -> GpuPool:
    """The free pool with every searched job's GPUs released, as `filtered` counts."""
    pool = snapshot.free_pool()
    for view in views:
        if view.running and view.allocation is not None:
            pool.release(view.allocation, view.spec.gpu_mem_mib)
    return pool


def unreachable(
    snapshot: Snapshot, views: Sequence[JobView], caps: States, capacity: States, lo: States
) -> dict[str, Reason]:
    """Why each job whose mask leaves it fewer GPUs than its minimum cannot run: the
    filter's reason for the first node it fences for the job (a GPU model it refuses,
    a cordon, CPU or memory), rather than the search's "no goodput gain"."""
    short = np.flatnonzero(caps.sum(axis=1) < lo)
    if not short.size:
        return {}
    pool = _released(snapshot, views)
    out: dict[str, Reason] = {}
    for row in short.tolist():
        fenced = np.flatnonzero(caps[row] < capacity)
        if not fenced.size:
            continue  # too few GPUs up at all: the search's own reason stands
        view = views[row]
        probe = Allocation.whole([(int(fenced[0]), 0)]).with_host(view.spec.host)
        why = refusal(snapshot, pool, view, probe)
        if why is not None:
            out[view.job_id] = why
    return out


def quota_bounds(
    room: QuotaRoom, views: Sequence[JobView], base: States, capacity: States
) -> QuotaBounds:
    """The quota bounds on the searched jobs (module docstring); `base` their GPUs now.
    A bound no allocation within `capacity` could pass is left out (repair's cost
    grows with the bounds)."""
    tree = room.tree
    num_jobs, num_nodes = base.shape
    leaf_of = [room.leaf.get(v.job_id) for v in views]
    members: list[np.ndarray] = []
    nodes: list[np.ndarray] = []
    bounds: list[float] = []
    gains: list[bool] = []

    def add(member: np.ndarray, on: np.ndarray, bound: float, gain: bool) -> None:
        if member.any() and bound < float(on @ capacity):
            members.append(member)
            nodes.append(on)
            bounds.append(max(0.0, bound))
            gains.append(gain)

    for figures in room.pools:
        pool = figures.pool
        on = np.ones(num_nodes, dtype=np.float32)
        if pool.nodes is not None:
            on = np.zeros(num_nodes, dtype=np.float32)
            on[[n for n in pool.nodes if n < num_nodes]] = 1.0
        held_now = base @ on
        add(np.array([leaf is None for leaf in leaf_of], np.float32), on, 0.0, True)
        for queue in tree.names():
            node = tree.node(queue)
            assert node is not None
            under = np.array(
                [leaf is not None and queue in tree.chain(leaf) for leaf in leaf_of], np.float32
            )
            if node.limit is not None:
                limit = pool.amount(node.limit)
                total = limit - figures.held.get(queue, 0.0) + float(held_now @ under)
                add(under, on, total, False)
            if node.leaf:
                total = float(held_now @ under) + figures.headroom(queue) + figures.spare_gpus
                add(under, on, total, False)
    if not bounds:
        empty = np.zeros((0, num_jobs), np.float32)
        return QuotaBounds(
            empty, np.zeros((0, num_nodes), np.float32), np.zeros(0, np.float32), np.zeros(0, bool)
        )
    return QuotaBounds(
        members=np.stack(members),
        nodes=np.stack(nodes),
        bound=np.array(bounds, np.float32),
        gains=np.array(gains, bool),
    )
