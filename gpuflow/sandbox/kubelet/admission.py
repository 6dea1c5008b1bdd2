"""A kubelet's admission of a pod's extended resources, for the emulated kubelets.

The sandbox's ProcessKubelet (kubelet.py) and the operator tests' kubelet double
(tests/operators/kubelet.py) call `refusal` before they run a pod bound to their
node, as a real kubelet's predicate admit handler does
(pkg/kubelet/lifecycle/predicate.go): a pod that requests more of an extended
resource (`nvidia.com/gpu`, `gpuflow.dev/gpu-share`: a name with a domain outside
kubernetes.io) than the node's `status.allocatable` has left beside the pods it
already admitted is not run; it goes Failed with reason `OutOf<resource>` and the
message "Pod was rejected: Node didn't have enough resource: ...". A resource the
node does not publish has none to give. CPU and memory are not checked here: the
emulated nodes share this machine and publish neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from operators.dljobs.requests import container_resources, quantity

Obj = dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """Why a kubelet does not admit a pod: its status reason and message."""

    reason: str
    message: str

    def status(self) -> Obj:
        """The status a kubelet writes for a pod it rejects (kubelet.go rejectPod)."""
        return {"phase": "Failed", "reason": self.reason, "message": self.message}


def is_extended(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-prefixed name outside kubernetes.io
    (and not a quota's `requests.` form)."""
    domain = name.partition("/")[0] if "/" in name else ""
    native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
    return bool(domain) and not native and not name.startswith("requests.")


def extended_requests(pod: Obj) -> dict[str, int]:
    """The extended resources a pod requests: per resource the larger of the app
    containers' sum and each init container's own (a request defaults to its limit)."""
    spec = pod.get("spec") or {}
    apps: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, n in _container_extended(c).items():
            apps[name] = apps.get(name, 0) + n
    for c in spec.get("initContainers") or []:
        for name, n in _container_extended(c).items():
            apps[name] = max(apps.get(name, 0), n)
    return {name: n for name, n in apps.items() if n}


def _container_extended(container: Obj) -> dict[str, int]:
    merged = container_resources(container)
    return {name: int(quantity(v)) for name, v in merged.items() if is_extended(name)}


def allocatable(node: Obj) -> dict[str, int]:
    """A Node's allocatable extended resources (a value that is not a quantity: none)."""
    out = {}
    for name, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        if is_extended(name):
            try:
                out[name] = int(quantity(value))
            except ValueError:
                out[name] = 0
    return out


def refusal(pod: Obj, read_node: Callable[[], Obj], admitted: Iterable[Obj]) -> Refusal | None:
    """None if `pod` fits its node (read with `read_node`, only if the pod requests an
    extended resource) beside the pods the kubelet `admitted` that have not finished,
    else the kubelet's refusal, naming the first resource short."""
    need = extended_requests(pod)
    if not need:
        return None
    have = allocatable(read_node())
    used: dict[str, int] = {}
    for other in admitted:
        for name, n in extended_requests(other).items():
            used[name] = used.get(name, 0) + n
    for name in sorted(need):
        capacity, taken = have.get(name, 0), used.get(name, 0)
        if need[name] > capacity - taken:
            message = (
                f"Pod was rejected: Node didn't have enough resource: {name}, "
                f"requested: {need[name]}, used: {taken}, capacity: {capacity}"
            )
            return Refusal(f"OutOf{name}", message)
    return None
