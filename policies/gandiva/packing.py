"""Gandiva's packing and its introspection (Xiao et al., OSDI 2018, §4.1, §4.2).

Called by `policies.gandiva` each round: `introspect` first judges the packs made in
earlier rounds by the jobs' measured speeds, then, when jobs still wait for GPUs,
`pack_waiting` puts low-utilisation waiting jobs next to running ones.

A pack is two jobs of the same gang size on the same GPUs of one node, each with an
MPS share of every GPU: its own utilisation plus half the GPU's spare, so that
neither is capped below what it uses alone. A host that held its GPUs whole is
restarted on the shared allocation (the model has no in-place change of a share);
a host left alone by an undone pack keeps its share and takes the next guest
without a restart. See `policies.gandiva` for the deviations from the paper.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache

from controller.model import Allocation, GpuShare, JobView, Reason
from controller.model.catalog import CATALOG, GENERIC, resolve
from policies.gandiva.queue import Kind, RoundRobin, WaitingKinds
from policies.gandiva.work import Work, gpu_util, mem_mib


@dataclass(frozen=True)
class Pack:
    """Two jobs sharing GPUs since `since_s`; `verified` once introspection kept it."""

    host: str
    guest: str
    since_s: float
    verified: bool = False


def model_pair(a: JobView, b: JobView) -> tuple[str, str]:
    first, second = sorted((a.spec.model, b.spec.model))
    return first, second


def introspect(
    work: Work,
    packs: Iterable[Pack],
    banned: frozenset[tuple[str, str]],
    *,
    quantum_s: float,
    margin: float,
) -> tuple[list[Pack], frozenset[tuple[str, str]]]:
    """Keep the packs whose jobs together beat running alone; undo the others.

    A pack is judged once, after it has run a quantum past both jobs' restarts, on
    the sum of each job's measured speed over its solo speed (§4.2: packing is kept
    only while it improves on time-slicing, whose sum is 1). An undone pack's guest
    is suspended and its model pair never packed again.
    """
    packs = tuple(packs)
    if not packs:
        return [], banned
    by_id = {j.job_id: j for j in work.snapshot.running()}
    kept: list[Pack] = []
    new_bans: list[tuple[str, str]] = []
    for pack in packs:
        host, guest = by_id.get(pack.host), by_id.get(pack.guest)
        if host is None or guest is None:
            continue  # one of them finished, failed or was stopped: the pack is over
        if pack.verified:
            kept.append(pack)
            continue
        ready = max(pack.since_s, host.resume_s, guest.resume_s) + quantum_s
        if work.now < ready:
            kept.append(pack)
            continue
        gain = host.rate_ips / host.nominal_rate_ips + guest.rate_ips / guest.nominal_rate_ips
        if gain > 1.0 + margin:
            kept.append(replace(pack, verified=True))
            continue
        new_bans.append(model_pair(host, guest))
        message = (
            f"unpacked from job {host.job_id}: together they ran at {gain:.2f} of one "
            f"GPU's worth of solo speed; {host.spec.model} and {guest.spec.model} are "
            f"not packed again"
        )
        work.suspend_job(guest, Reason("Unpacked", message))
    return kept, banned | frozenset(new_bans)


@dataclass(frozen=True)
class PackOptions:
    util_max: float
    share_unsized: bool


def pack_waiting(
    work: Work,
    queue: RoundRobin,
    kinds: WaitingKinds | None,
    packs: list[Pack],
    banned: frozenset[tuple[str, str]],
    options: PackOptions,
) -> None:
    """Start waiting jobs on running jobs' GPUs, in round-robin order.

    Appends the new packs to `packs`. A guest needs a host of its gang size on one
    node, neither elastic, their summed utilisation below `util_max`, their memory
    within every GPU's, and a model pair not banned by introspection. A gang size is
    closed once no host of it is left, or (with the waiting jobs' `kinds`) once no
    kind of job still to come could pack.
    """
    floor = _lightest_guest(queue, kinds, options.util_max)
    if floor is None:
        return
    in_packs = {p.host for p in packs} | {p.guest for p in packs}
    hosts = _hosts(work, in_packs, options, options.util_max - floor)
    if not hosts:
        return
    lightest = min(gpu_util(jobs[0].spec) for jobs in hosts.values())
    if lightest + floor >= options.util_max:
        return  # no guest is light enough for any host
    guests = queue.walk()
    to_come = _ToCome(kinds, queue, lightest, options)
    for guest in guests:
        spec = guest.spec
        n = spec.num_gpus
        candidates = hosts.get(n)
        if not candidates:
            guests.close(n)
            continue
        util = to_come.util(spec.model, spec.gpu_util)
        key = (n, spec.model, spec.gpu_mem_mib, spec.gpu_util)
        if (
            util + lightest < options.util_max
            and key not in to_come.hopeless
            and _packable(guest, options.share_unsized)
        ):
            _pack_one(work, guest, util, candidates, packs, banned, options, to_come)
        if not to_come.any_can_pack(guest, candidates):
            guests.close(n)


def _pack_one(
    work: Work,
    guest: JobView,
    util: float,
    candidates: list[JobView],
    packs: list[Pack],
    banned: frozenset[tuple[str, str]],
    options: PackOptions,
    to_come: _ToCome,
) -> None:
    """Pack `guest` on the first host that takes it, lightest first."""
    for i, host in enumerate(candidates):
        if gpu_util(host.spec) + util >= options.util_max:
            return  # hosts are sorted lightest first
        if model_pair(host, guest) not in banned and _try_pack(work, host, guest, options):
            del candidates[i]
            packs.append(Pack(host.job_id, guest.job_id, work.now))
            return
    spec = guest.spec
    key = (spec.num_gpus, spec.model, spec.gpu_mem_mib, spec.gpu_util)
    to_come.hopeless.add(key)  # hosts only go


class _ToCome:
    """The kinds of the waiting jobs a packing walk has not reached yet, by gang size,
    and those known not to pack; with no `WaitingKinds` every kind may still come."""

    __slots__ = ("_counts", "_kinds", "_lightest", "_options", "_started", "_utils", "hopeless")

    def __init__(
        self, kinds: WaitingKinds | None, queue: RoundRobin, lightest: float, options: PackOptions
    ) -> None:
        self._kinds = kinds
        self._started = queue.started() if kinds is not None else []
        self._lightest = lightest
        self._options = options
        self._counts: dict[int, dict[Kind, int]] = {}
        self._utils: dict[str, float] = {}
        self.hopeless: set[tuple[int, str, int | None, float | None]] = set()

    def util(self, model: str, own: float | None) -> float:
        """A job's utilisation from its kind: its own figure, else its model's."""
        if own is not None:
            return own
        util = self._utils.get(model)
        if util is None:
            util = self._utils[model] = resolve(model).gpu_util
        return util

    def any_can_pack(self, visited: JobView, candidates: list[JobView]) -> bool:
        """Whether a job of `visited`'s size behind it could still pack on `candidates`
        (counting `visited` as reached)."""
        if self._kinds is None:
            return True
        spec = visited.spec
        n = spec.num_gpus
        counts = self._counts.get(n)
        if counts is None:
            counts = self._counts[n] = dict(self._kinds.by_size.get(n, {}))
            for job in self._started:
                s = job.spec
                if s.num_gpus == n:
                    counts[s.model, s.gpu_mem_mib, s.elastic, s.gpu_util] -= 1
        counts[spec.model, spec.gpu_mem_mib, spec.elastic, spec.gpu_util] -= 1
        if not candidates:
            return False
        util_max, share_unsized = self._options.util_max, self._options.share_unsized
        first = gpu_util(candidates[0].spec)
        for (model, mem, elastic, own), count in counts.items():
            if count <= 0 or elastic or (mem is None and not share_unsized):
                continue
            util = self.util(model, own)
            if util + self._lightest >= util_max or util + first >= util_max:
                continue
            if (n, model, mem, own) not in self.hopeless:
                return True
        return False


def _lightest_guest(queue: RoundRobin, kinds: WaitingKinds | None, util_max: float) -> float | None:
    """A floor under the utilisation of every waiting job (None: nobody waits), which
    the hosts are chosen by: the catalogue's lightest model where that lets in no host
    that could pair with a waiting job and that the lightest model actually waiting
    would have left out, and no waiting job has a utilisation of its own (a trace's,
    or measured); else the lightest waiting job itself, read from the whole queue."""
    if not queue.count():
        return None
    if kinds is not None and not kinds.own_utils and _floor_is_safe(util_max):
        return min(_CATALOGUE_UTILS)
    return min(gpu_util(job.spec) for job in queue.walk())


# Every utilisation a model's catalogue entry can give (`resolve` gives every name one
# of these); a job's own figure (JobSpec.gpu_util) may be any other.
_CATALOGUE_UTILS = frozenset(p.gpu_util for p in (*CATALOG.values(), GENERIC))


@cache
def _floor_is_safe(util_max: float) -> bool:
    """Whether a host left out below `util_max - m` (m: the lightest waiting model)
    reaches `util_max` with every model of m or more, in floating point too, for
    every m: then the hosts the catalogue's floor lets in beyond those never pair."""
    utils = _CATALOGUE_UTILS
    return all(
        host + guest >= util_max
        for m in utils
        for host in utils
        if host >= util_max - m
        for guest in utils
        if guest >= m
    )


def _packable(job: JobView, share_unsized: bool) -> bool:
    return not job.spec.elastic and mem_mib(job.spec, share_unsized) is not None


def _hosts(
    work: Work, in_packs: set[str], options: PackOptions, util_below: float
) -> dict[int, list[JobView]]:
    """Running jobs lighter than `util_below` that could take a guest, by gang size,
    lightest first."""
    out: dict[int, list[JobView]] = {}
    util_of: dict[str, float] = {}
    for job in work.snapshot.running():
        util = util_of[job.job_id] = gpu_util(job.spec)
        if util >= util_below or job.job_id in in_packs or job.spec.elastic:
            continue
        alloc = job.allocation
        if alloc is None or len(alloc.nodes) != 1 or not work.settled(job):
            continue
        if not _packable(job, options.share_unsized):
            continue
        if alloc.shared and not _alone(work, alloc):
            continue
        out.setdefault(alloc.num_gpus, []).append(job)
    for jobs in out.values():
        jobs.sort(key=lambda j: (util_of[j.job_id], j.job_id))
    return out


def _alone(work: Work, alloc: Allocation) -> bool:
    """Whether nobody else holds a share of the allocation's GPUs."""
    used = work.pool.shared_gpus()
    return all(abs(used.get((s.node, s.gpu), 0.0) - s.fraction) < 1e-9 for s in alloc.shares)


def _try_pack(work: Work, host: JobView, guest: JobView, options: PackOptions) -> bool:
    u_host, u_guest = gpu_util(host.spec), gpu_util(guest.spec)
    if u_host + u_guest >= options.util_max:
        return False
    host_mem = mem_mib(host.spec, options.share_unsized)
    guest_mem = mem_mib(guest.spec, options.share_unsized)
    assert host_mem is not None and guest_mem is not None
    alloc = host.allocation
    assert alloc is not None
    gpu_mem = work.snapshot.cluster.nodes[alloc.nodes[0]].gpu_type.mem_mib
    if host_mem + guest_mem > gpu_mem:
        return False
    if alloc.shared:  # alone on its share since an unpack: the guest takes the rest
        guest_alloc = Allocation(tuple(GpuShare(s.node, s.gpu, 1.0 - s.fraction) for s in alloc))
        if not work.pool.fits(guest_alloc, guest.spec.gpu_mem_mib):
            return False
        if not work.allows(guest, guest_alloc):
            return False
        work.start(guest, guest_alloc)
        return True
    host_frac = _host_fraction(u_host, u_guest)
    host_alloc = Allocation(tuple(GpuShare(s.node, s.gpu, host_frac) for s in alloc))
    guest_alloc = Allocation(tuple(GpuShare(s.node, s.gpu, 1.0 - host_frac) for s in alloc))
    if not work.allows(guest, guest_alloc):
        return False  # the host's node is cordoned, of a model or short of CPU for it
    work.move(host, host_alloc)
    work.start(guest, guest_alloc)
    return True


def _host_fraction(u_host: float, u_guest: float) -> float:
    """The host's share: its utilisation plus half the spare (in proportion if none)."""
    total = u_host + u_guest
    if total >= 1.0:
        return u_host / total
    return u_host + (1.0 - total) / 2.0
