"""One sample of the live cluster as rows of the tables cluster_samples, node_samples
and tenant_samples (api.store.models), built from what the backend describes.

Called by api.samples.sampler with `JobBackend.describe()`'s nodes (each GPU's job
shares and utilisation, in both modes), each GPU's readings (api.samples.readings),
the running jobs' tenants and the waiting jobs' tenants and waits (the job database).
Pure: the tests build samples from hand-made nodes.

A node row keeps its GPUs' figures in one JSON object of lists by GPU index
(`GPU_FIELDS`), integers to keep it short: utilisation in percent, allocation in
hundredths of a GPU, memory used in MiB, temperature in degrees C, power in watts,
uncorrected ECC errors, and healthy as 1 or 0; null where not known (cluster mode:
a node whose agent has not reported; local mode: temperature, power and ECC, which
the simulator does not model).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.schemas.cluster import NodePublic

# The per-GPU lists of a node row's `gpus`, and how compaction merges each over a bin
# (api.samples.compaction): a mean, except that an ECC count keeps its largest value
# and a GPU is unhealthy over the bin if it was at any sample.
GPU_FIELDS: dict[str, str] = {
    "util": "mean",
    "alloc": "mean",
    "mem": "mean",
    "temp": "mean",
    "power": "mean",
    "ecc": "max",
    "healthy": "min",
}


@dataclass(frozen=True)
class GpuReading:
    """What is known of one GPU besides its shares and utilisation (None: not known)."""

    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    ecc_errors: int | None = None
    healthy: bool = True


# Node name -> GPU index -> its reading; a GPU left out is not known.
Readings = Mapping[str, Mapping[int, GpuReading]]


@dataclass(frozen=True)
class Waiting:
    """A waiting job: its tenant and how long it has waited (now less its submit_s)."""

    tenant: str
    wait_s: float


@dataclass
class Sample:
    cluster: dict[str, Any]
    nodes: list[dict[str, Any]]
    tenants: list[dict[str, Any]]


@dataclass
class _Tenant:
    gpus: float = 0.0
    running: int = 0
    waiting: int = 0
    waits: list[float] = field(default_factory=list)


def build_sample(
    t_s: float,
    step_s: float,
    nodes: Sequence[NodePublic],
    readings: Readings,
    tenant_of: Mapping[str, str],
    waiting: Sequence[Waiting],
) -> Sample:
    """The rows of one sample at `t_s`, standing for `step_s`; `tenant_of` maps each
    running job's id to its tenant (a job not in it, not recorded yet, counts in the
    cluster's figures but no tenant's)."""
    node_rows = [_node_row(t_s, step_s, n, readings.get(n.name, {})) for n in nodes]
    tenants: dict[str, _Tenant] = defaultdict(_Tenant)
    running: set[str] = set()
    for node in nodes:
        for gpu in node.gpu_list:
            for share in gpu.shares:
                if share.job is None:
                    continue
                running.add(share.job)
                tenant = tenant_of.get(share.job)
                if tenant is not None:
                    tenants[tenant].gpus += share.fraction
    for job in running:
        if job in tenant_of:
            tenants[tenant_of[job]].running += 1
    for w in waiting:
        t = tenants[w.tenant]
        t.waiting += 1
        t.waits.append(w.wait_s)
    waits = [w.wait_s for w in waiting]
    utils = [g.util for n in nodes for g in n.gpu_list if g.util is not None]
    known = [r for by_gpu in readings.values() for r in by_gpu.values()]
    used = [r.mem_used_mib for r in known if r.mem_used_mib is not None]
    total = [r.mem_total_mib for r in known if r.mem_total_mib is not None]
    cluster = {
        "t_s": t_s,
        "step_s": step_s,
        "gpus": sum(n.gpus for n in nodes),
        "gpus_allocated": round(sum(n.gpus_allocated for n in nodes), 3),
        "util": round(sum(utils) / len(utils), 4) if utils else None,
        "mem_used_mib": float(sum(used)) if used else None,
        "mem_total_mib": float(sum(total)) if total else None,
        "gpus_unhealthy": float(sum(1 for r in known if not r.healthy)),
        "running": float(len(running)),
        "waiting": float(len(waits)),
        "wait_mean_s": sum(waits) / len(waits) if waits else None,
        "wait_max_s": max(waits) if waits else None,
    }
    tenant_rows = [
        {
            "t_s": t_s,
            "tenant": name,
            "step_s": step_s,
            "gpus": round(t.gpus, 3),
            "running": float(t.running),
            "waiting": float(t.waiting),
            "wait_max_s": max(t.waits) if t.waits else None,
        }
        for name, t in sorted(tenants.items())
    ]
    return Sample(cluster, node_rows, tenant_rows)


def _node_row(
    t_s: float, step_s: float, node: NodePublic, readings: Mapping[int, GpuReading]
) -> dict[str, Any]:
    lists: dict[str, list[int | None]] = {name: [] for name in GPU_FIELDS}
    mem_total: int | None = None
    for gpu in node.gpu_list:
        r = readings.get(gpu.index)
        lists["util"].append(None if gpu.util is None else round(gpu.util * 100))
        lists["alloc"].append(round(sum(s.fraction for s in gpu.shares) * 100))
        lists["mem"].append(None if r is None else r.mem_used_mib)
        lists["temp"].append(None if r is None else r.temperature_c)
        lists["power"].append(None if r is None or r.power_w is None else round(r.power_w))
        lists["ecc"].append(None if r is None else r.ecc_errors)
        lists["healthy"].append(None if r is None else int(r.healthy))
        if r is not None and r.mem_total_mib is not None:
            mem_total = max(mem_total or 0, r.mem_total_mib)
    utils = [g.util for g in node.gpu_list if g.util is not None]
    mems = [m for m in lists["mem"] if m is not None]
    return {
        "t_s": t_s,
        "node": node.name,
        "step_s": step_s,
        "gpus_allocated": round(node.gpus_allocated, 3),
        "util": round(sum(utils) / len(utils), 4) if utils else None,
        "mem_used_mib": float(sum(mems)) if mems else None,
        "gpus": {**lists, "mem_total": mem_total},
    }
