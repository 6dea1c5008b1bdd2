"""Gandiva's round as it read the queue before issue 16: every waiting job, every round.

The reference that `tests/policies/test_gandiva_walk.py` compares `policies.gandiva`
with: the same mechanisms (introspection, placement with defragmentation, shrinking,
packing, time-slicing, consolidation and growth), each handed the whole list of the
jobs still waiting in round-robin order and walking all of it, and a reason written
for every job left waiting. The helpers that never read the queue are the policy's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from controller.model import JobView, Plan, Reason, Snapshot
from policies.gandiva import (
    Gandiva,
    GandivaState,
    _clear_node,
    _expired,
    _pop_settled,
    _sliced_out,
    _slices,
    _waiting_reason,
)
from policies.gandiva.moves import consolidate, defragment, grow, movers_by_node, shrink_for
from policies.gandiva.packing import (
    Pack,
    PackOptions,
    _hosts,
    _packable,
    _try_pack,
    introspect,
    model_pair,
)
from policies.gandiva.queue import gandiva_key
from policies.gandiva.work import Work, gpu_util


def reference_round(policy: Gandiva, snapshot: Snapshot, state: Any) -> Plan:
    prev = state if isinstance(state, GandivaState) else GandivaState()
    work = Work(snapshot, share_unsized=policy.share_unsized, migrations=policy.max_migrations)
    packs, banned = introspect(
        work, prev.packs, prev.banned_pairs, quantum_s=policy.quantum_s, margin=policy.pack_margin
    )
    waiting = sorted(snapshot.waiting(), key=gandiva_key)
    left = _place(work, waiting)
    if left:
        asked = (j.spec.num_gpus for j in left)
        if shrink_for(work, lambda: sum(j.spec.num_gpus for j in left), min(asked)):
            left = _place(work, left)
        options = PackOptions(policy.pack_util_max, policy.share_unsized)
        left = _pack_waiting(work, left, packs, banned, options)
        left = _time_slice(work, left, prev.slice_start_s, policy.quantum_s)
    else:
        consolidate(work)
        grow(work)
    running_sizes = {a.num_gpus for a in work.run.values()}
    for job in left:
        n = job.spec.num_gpus
        work.reasons[job.job_id] = _waiting_reason(n, work.pool.total_free, n in running_sizes)
    slices = _slices(work, prev.slice_start_s)
    return Plan(
        run=work.run,
        reasons=work.reasons,
        default_reason=Reason("Waiting", "waiting for GPUs"),
        suspend=frozenset(work.suspend),
        state=GandivaState(MappingProxyType(slices), tuple(packs), banned),
        wake_s=policy._wake(work, slices, packs, bool(left or work.suspend)),
    )


def _place(work: Work, jobs: list[JobView]) -> list[JobView]:
    left: list[JobView] = []
    pool, placer = work.pool, work.snapshot.placer
    largest_node = work.snapshot.cluster.max_gpus_per_node
    movers: dict[int, list[JobView]] | None = None
    hopeless: set[int] = set()
    for i, job in enumerate(jobs):
        n = job.spec.num_gpus
        if pool.total_free < n:
            if pool.total_free == 0:
                left.extend(jobs[i:])
                break
            left.append(job)
            continue
        alloc = placer.place(pool, job, n)
        if (alloc is None or len(alloc.nodes) > 1) and n <= largest_node and n not in hopeless:
            if movers is None:
                movers = movers_by_node(work)
            if defragment(work, job, movers):
                continue
            hopeless.add(n)
        if alloc is None:
            left.append(job)
        else:
            work.start(job, alloc)
    return left


def _pack_waiting(
    work: Work,
    waiting: Sequence[JobView],
    packs: list[Pack],
    banned: frozenset[tuple[str, str]],
    options: PackOptions,
) -> list[JobView]:
    util_of = {job.job_id: gpu_util(job.spec) for job in waiting}
    if not util_of:
        return list(waiting)
    in_packs = {p.host for p in packs} | {p.guest for p in packs}
    hosts = _hosts(work, in_packs, options, options.util_max - min(util_of.values()))
    if not hosts:
        return list(waiting)
    lightest = min(gpu_util(jobs[0].spec) for jobs in hosts.values())
    placed: dict[str, None] = {}
    hopeless: set[tuple[int, str, int | None, float | None]] = set()
    for guest in waiting:
        spec = guest.spec
        util = util_of[guest.job_id]
        key = (spec.num_gpus, spec.model, spec.gpu_mem_mib, spec.gpu_util)
        if util + lightest >= options.util_max or key in hopeless:
            continue
        if not _packable(guest, options.share_unsized):
            continue
        candidates = hosts.get(spec.num_gpus, [])
        for i, host in enumerate(candidates):
            if gpu_util(host.spec) + util >= options.util_max:
                break
            if model_pair(host, guest) not in banned and _try_pack(work, host, guest, options):
                del candidates[i]
                placed[guest.job_id] = None
                packs.append(Pack(host.job_id, guest.job_id, work.now))
                break
        else:
            hopeless.add(key)
    return [j for j in waiting if j.job_id not in placed]


def _time_slice(
    work: Work, waiting: list[JobView], slices: Mapping[str, float], quantum_s: float
) -> list[JobView]:
    by_size, by_node = _expired(work, slices, quantum_s)
    if not by_size:
        return waiting
    left: list[JobView] = []
    gave_up: set[int] = set()
    for i, job in enumerate(waiting):
        n = job.spec.num_gpus
        if n in gave_up:
            left.append(job)
            if not any(by_size.values()):
                left.extend(waiting[i + 1 :])
                break
            continue
        victim = _pop_settled(work, by_size.get(n), job)
        if victim is not None:
            assert victim.allocation is not None
            work.suspend_job(victim, _sliced_out(victim, job, quantum_s))
            work.start(job, victim.allocation)
            continue
        if n > 1 and work.now - job.waiting_since_s < quantum_s:
            left.append(job)
            continue
        if not _clear_node(work, job, by_node, quantum_s):
            gave_up.add(n)
            left.append(job)
    return left
