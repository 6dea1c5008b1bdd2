"""Cluster mode's cluster view: the Nodes the agents publish and the DLJobs' allocations.

Called by `api.cluster_mode.backend.ClusterModeBackend.describe` with the informers' current Nodes
and DLJobs. Each running DLJob's `status.allocation.shares` (node, GPU index, UUID,
fraction: operators/pods/__init__.py `ShareRecord`, written by the operator) says which GPU
it holds; each Node's `gpuflow.dev/gpu-status` annotation (operators/agent) gives
the GPUs' NVML utilisation, by UUID. Fragmentation counts, as in local mode and in
replays (`controller.placement.unallocatable_idle_gpus`), the free GPUs of ready
nodes that no waiting DLJob's `spec.gpus` fits. CPU and memory count as the operator
counts them (operators/backend.py): each node's `status.allocatable`, less what one
worker pod of each running DLJob requests on every node it holds GPUs on; free GPUs
of a node whose free CPU or memory cannot hold a worker pod of any waiting DLJob are
fragmented too (stranded, in FGD's terms). The operator's network rates are not read
here: `link_loads` is null in cluster mode.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable

from api.backends import ClusterDescription
from api.cluster_view import gpu_list
from api.schemas.cluster import ClusterPublic, NodePublic
from controller.model import NO_HOST, Allocation, GpuPool, GpuShare, HostRequest
from controller.placement import unallocatable_idle_gpus
from operators import crd
from operators.dljobs.requests import Requests
from operators.dljobs.resources import (
    ADMITTED,
    BACKOFF,
    INVALID,
    PREEMPTED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    UNSCHEDULABLE,
    database_id,
)
from operators.dljobs.template import pod_requests
from operators.kube import Obj
from operators.nodes import ClusterView
from operators.policy_config import RunningPolicy

UNPLACED_PHASES = (QUEUED, PREEMPTED, SUSPENDED, BACKOFF, UNSCHEDULABLE, INVALID)


def describe_kube(
    view: ClusterView,
    node_objs: Iterable[Obj],
    dljobs: Iterable[Obj],
    now_s: float,
    *,
    gpus: bool = True,
    policy: RunningPolicy | None = None,
) -> ClusterDescription:
    """Nodes with their GPUs' shares and utilisation (`gpus` False: none), and the
    summary; `policy`: what the operator runs (None: not known yet)."""
    cluster = view.cluster
    allocated: dict[str, float] = defaultdict(float)
    jobs: dict[str, list[str]] = defaultdict(list)
    shares: dict[str, dict[int, list[tuple[str, float]]]] = defaultdict(dict)
    held: list[Allocation] = []
    waiting_gpus: list[int] = []
    waiting_hosts: set[HostRequest] = set()
    running = waiting = finished = 0
    for obj in dljobs:
        status = obj.get("status") or {}
        phase = str(status.get("phase") or QUEUED)
        if phase in (ADMITTED, RUNNING):
            running += 1
            job_id = database_id(obj)
            records = (status.get("allocation") or {}).get("shares") or []
            for share in records:
                node, fraction = str(share.get("node")), float(share.get("fraction") or 1.0)
                allocated[node] += fraction
                gpu = share.get("gpu")
                if isinstance(gpu, int):
                    shares[node].setdefault(gpu, []).append((job_id, fraction))
            for node in sorted({str(s.get("node")) for s in records}):
                jobs[node].append(job_id)
            alloc = _allocation(view, records)
            if alloc is not None:
                held.append(alloc.with_host(_pod_host(obj)))
        elif phase in UNPLACED_PHASES:
            waiting += 1
            asked = (obj.get("spec") or {}).get("gpus")
            if isinstance(asked, int) and asked > 0:
                waiting_gpus.append(asked)
                waiting_hosts.add(_pod_host(obj))
        elif phase == SUCCEEDED:
            finished += 1
    utils = _utilisation(node_objs, view) if gpus else {}
    nodes = [
        NodePublic(
            name=n.name,
            rack=n.rack,
            gpu_type=n.gpu_type.name,
            gpus=n.num_gpus,
            gpus_allocated=round(allocated[n.name], 6),
            jobs=jobs[n.name],
            state=view.state_of(i),
            gpu_list=gpu_list(n.num_gpus, shares[n.name], utils.get(n.name), omitted=None)
            if gpus
            else [],
        )
        for i, n in enumerate(cluster.nodes)
    ]
    pool = _free_pool(view, held)
    summary = ClusterPublic(
        name=cluster.name,
        nodes=len(cluster.nodes),
        gpus=cluster.num_gpus,
        gpus_allocated=round(sum(allocated.values()), 6),
        running=running,
        waiting=waiting,
        finished=finished,
        policy=policy.name if policy is not None else "unknown",
        policy_options=policy.options if policy is not None else {},
        clock="wall",
        now_s=now_s,
        time_scale=1.0,
        gpus_free=pool.total_free,
        fragmentation=_fragmented(pool, view, waiting_gpus, waiting_hosts),
        link_loads=None,
    )
    return ClusterDescription(nodes, summary)


def _allocation(view: ClusterView, records: list[dict[str, object]]) -> Allocation | None:
    """A DLJob's shares as an Allocation on the cluster's indices; None if a share
    names a node or GPU the cluster does not have (a status older than the Nodes)."""
    cluster = view.cluster
    out = []
    for share in records:
        try:
            node = cluster.node_index(str(share.get("node")))
        except KeyError:
            return None
        gpu = share.get("gpu")
        fraction = share.get("fraction") or 1.0
        if not isinstance(gpu, int) or not 0 <= gpu < cluster.nodes[node].num_gpus:
            return None
        if not isinstance(fraction, int | float) or not 0.0 < fraction <= 1.0:
            return None
        out.append(GpuShare(node, gpu, float(fraction)))
    try:
        return Allocation(tuple(out))
    except ValueError:
        return None


def _free_pool(view: ClusterView, held: list[Allocation]) -> GpuPool:
    """The free GPUs, CPU and memory: every GPU of nodes up and not cordoned and each
    node's allocatable, less the allocations (one whose GPUs no longer fit, a status
    not yet caught up with another, is skipped; CPU and memory count even past a
    node's allocatable, as the operator counts running pods)."""
    cluster = view.cluster
    pool = GpuPool(
        cluster.gpus_per_node,
        (n.gpu_type.mem_mib for n in cluster.nodes),
        down=view.down_nodes,
        cordoned=view.cordoned_nodes,
        host_capacity=(_host(view.allocatable.get(n.name)) for n in cluster.nodes),
    )
    for alloc in held:
        gpus_only = alloc.with_host(NO_HOST)
        if pool.fits(gpus_only, None):
            pool.take(gpus_only)
            pool.hold_host(alloc)
    return pool


def _fragmented(
    pool: GpuPool, view: ClusterView, waiting_gpus: list[int], waiting_hosts: set[HostRequest]
) -> int:
    """Idle GPUs no waiting DLJob could use: too few on their node for every waiting
    size, or on a node whose free CPU or memory holds none of the waiting pods."""
    if not waiting_gpus:
        return 0
    stranded = [
        n
        for n in range(pool.num_nodes)
        if pool.free_gpus(n) and not any(pool.host_fits(n, h) for h in waiting_hosts)
    ]
    if not stranded:
        return unallocatable_idle_gpus(pool, view.cluster, waiting_gpus)
    rest = pool.copy()
    for node in stranded:
        rest.cordon(node)
    idle = sum(len(pool.free_gpus(n)) for n in stranded)
    return idle + unallocatable_idle_gpus(rest, view.cluster, waiting_gpus)


def _pod_host(obj: Obj) -> HostRequest:
    """What one worker pod of the DLJob requests (nothing, for a spec that cannot make
    pods: the operator marks it Invalid)."""
    try:
        req = pod_requests(obj)
    except (ValueError, KeyError, TypeError):
        return NO_HOST
    return HostRequest(req.cpu_milli, req.mem_mib)


def _host(allocatable: Requests | None) -> HostRequest | None:
    return None if allocatable is None else HostRequest(allocatable.cpu_milli, allocatable.mem_mib)


def _utilisation(node_objs: Iterable[Obj], view: ClusterView) -> dict[str, dict[int, float]]:
    """Node name -> GPU index -> utilisation 0..1, from the agents' gpu-status
    annotations (`utilPct` by UUID); nodes without one are absent (not known)."""
    index = {n.name: {g.uuid: g.index for g in n.gpus} for n in view.cluster.nodes}
    out: dict[str, dict[int, float]] = {}
    for obj in node_objs:
        name = str(obj["metadata"]["name"])
        text = (obj["metadata"].get("annotations") or {}).get(crd.ANN_NODE_GPU_STATUS)
        if name not in index or not text:
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        gpus = doc.get("gpus") if isinstance(doc, dict) else None
        util: dict[int, float] = {}
        for g in gpus if isinstance(gpus, list) else []:
            gpu = index[name].get(str(g.get("uuid"))) if isinstance(g, dict) else None
            pct = g.get("utilPct") if isinstance(g, dict) else None
            if gpu is not None and isinstance(pct, int | float):
                util[gpu] = min(1.0, max(0.0, pct / 100.0))
        out[name] = util
    return out
