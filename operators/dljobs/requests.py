"""CPU and memory: Kubernetes quantities, what a pod requests, what a node can hold.

`operators/dljobs/template.py` sums a DLJob's worker pod requests with `spec_requests`,
`operators/nodes.py` reads each Node's `status.allocatable` with `node_allocatable`,
and `pods.Occupancy` refuses a pod that does not fit what its node has left.
Quantities are parsed by the official client's `parse_quantity` (suffixes m, k, Ki,
M, Mi, ..., exponents); requests round up and allocatable rounds down, so a rounding
never makes a pod fit that Kubernetes would refuse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from kubernetes.utils.quantity import parse_quantity  # type: ignore[import-untyped]

Obj = dict[str, Any]
MIB = 2**20
# The quantity grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go): a signed
# decimal number, then a binary suffix (Ki..Ei), a decimal one (n u m k M G T P E) or
# a decimal exponent. The client's parse_quantity is laxer (it accepts "5 Gi").
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
# Stands for "no limit" of one resource of a node that reports only the other.
UNCONSTRAINED = 2**62


class Requests(NamedTuple):
    """CPU in millicores and memory in MiB, one pod's or a node's."""

    cpu_milli: int = 0
    mem_mib: int = 0

    def plus(self, other: Requests) -> Requests:
        return Requests(self.cpu_milli + other.cpu_milli, self.mem_mib + other.mem_mib)

    def minus(self, other: Requests) -> Requests:
        return Requests(self.cpu_milli - other.cpu_milli, self.mem_mib - other.mem_mib)

    def most(self, other: Requests) -> Requests:
        """Each resource's larger value."""
        return Requests(max(self.cpu_milli, other.cpu_milli), max(self.mem_mib, other.mem_mib))


NO_REQUESTS = Requests()


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("500m", "64Gi", 8); ValueError if it is not one or < 0."""
    if isinstance(value, str) and not _QUANTITY.fullmatch(value):
        raise ValueError(f"invalid quantity {value!r}")
    try:
        q: Decimal = parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation) as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc
    if q < 0:
        raise ValueError(f"negative quantity {value!r}")
    return q


def _resources(values: Mapping[str, object], up: bool) -> Requests:
    rnd = math.ceil if up else math.floor
    cpu = values.get("cpu")
    mem = values.get("memory")
    return Requests(
        rnd(quantity(cpu) * 1000) if cpu is not None else 0,
        rnd(quantity(mem) / MIB) if mem is not None else 0,
    )


def container_resources(container: Obj) -> dict[str, object]:
    """What a container requests, by resource name; a resource with a limit and no
    request requests its limit, as the API server defaults it."""
    res = container.get("resources") or {}
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def container_requests(container: Obj) -> Requests:
    """What a container requests of CPU and memory (container_resources)."""
    return _resources(container_resources(container), up=True)


def spec_requests(pod_spec: Obj) -> Requests:
    """A pod's effective requests as the scheduler computes them: the larger of the app
    containers' sum and each init container's own (plus the sidecars started before
    it); sidecars (init containers with restartPolicy Always) run beside the app."""
    sidecars = Requests()
    init_peak = Requests()
    for c in pod_spec.get("initContainers") or []:
        req = container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = sidecars.plus(req)
        else:
            init_peak = init_peak.most(req.plus(sidecars))
    apps = total(container_requests(c) for c in pod_spec.get("containers") or [])
    return init_peak.most(apps.plus(sidecars))


def node_allocatable(node: Obj) -> Requests | None:
    """A Node's `status.allocatable` CPU and memory; None when it reports none (the
    node is then unconstrained). A resource missing from it counts as unconstrained."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    if "cpu" not in alloc and "memory" not in alloc:
        return None
    try:
        got = _resources(alloc, up=False)
    except ValueError:
        return None  # not a quantity: the kubelet never writes one; do not constrain
    return Requests(
        got.cpu_milli if "cpu" in alloc else UNCONSTRAINED,
        got.mem_mib if "memory" in alloc else UNCONSTRAINED,
    )


def format_cpu(milli: int) -> str:
    """8000 -> "8", 1500 -> "1.5", 250 -> "0.25"."""
    return (
        f"{Decimal(milli) / 1000:f}".rstrip("0").rstrip(".") if milli % 1000 else str(milli // 1000)
    )


def shortfall(node: str, need: Requests, free: Requests) -> str:
    """ "" if `need` fits in `free`, else which resource does not, by name:
    "node-1: needs 8 CPU, 6 allocatable free"."""
    if need.cpu_milli > free.cpu_milli:
        have = format_cpu(max(0, free.cpu_milli))
        return f"{node}: needs {format_cpu(need.cpu_milli)} CPU, {have} allocatable free"
    if need.mem_mib > free.mem_mib:
        return (
            f"{node}: needs {need.mem_mib} MiB memory, {max(0, free.mem_mib)} MiB allocatable free"
        )
    return ""


def total(requests: Iterable[Requests]) -> Requests:
    out = Requests()
    for r in requests:
        out = out.plus(r)
    return out
