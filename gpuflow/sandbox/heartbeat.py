"""A kubelet's Node and its heartbeats: what the sandbox's ProcessKubelet (kubelet.py)
keeps up for its node toward the real kube-apiserver.

`NodeHeartbeat.register()` creates the Node as a kubelet registers itself (or, when it
exists already, posts its status): labels `kubernetes.io/hostname`, `kubernetes.io/os`
and `kubernetes.io/arch`; status with its addresses (InternalIP, Hostname), capacity
and allocatable, and the conditions a kubelet reports (Ready True with reason
KubeletReady; MemoryPressure, DiskPressure and PIDPressure False). Capacity and
allocatable hold `pods` and the extended resources its device plugins publish
(`devices`: the sandbox's `nvidia.com/gpu`), no CPU or memory: the emulated nodes
share this machine's CPUs and memory, so no node claims them, and the operator
(operators/requests.py `node_allocatable`) then leaves CPU and memory unconstrained,
as it did before the real control plane.

`run()` (a thread of the kubelet) then renews the node's Lease in `kube-node-lease`
every `renew_s` (the kubelet's default: a quarter of the 40-s lease), which is what the
node lifecycle controller watches, and posts the node's status again whenever the
Node's Ready condition is not True (the controller marked it Unknown while the
heartbeats stopped) or `status_report_s` has passed (the kubelet's
nodeStatusReportFrequency). Stopping it (`stop`) stops the heartbeats alone: tests use
that to see the controller mark the node NotReady.

Every write is the node's own, so it passes the Node authorizer and NodeRestriction
when the kubelet holds the credentials of user `system:node:<name>`
(controlplane.py `ControlPlane.node_kubeconfig`).
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from operators.kube import ALREADY_EXISTS, API_ERRORS, KubeApi, Obj, status_code
from operators.resources import micro_time

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
MAX_PODS = "110"  # the kubelet's --max-pods default
# Go's GOARCH names, which kubernetes.io/arch carries, for what platform.machine() says.
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}
# The pressure conditions and the reasons the kubelet gives when there is none
# (pkg/kubelet/nodestatus/setters.go).
PRESSURES = {
    "MemoryPressure": "KubeletHasSufficientMemory",
    "DiskPressure": "KubeletHasNoDiskPressure",
    "PIDPressure": "KubeletHasSufficientPID",
}


@dataclass(frozen=True)
class HeartbeatConfig:
    """The kubelet's heartbeat periods; the defaults are the kubelet's own."""

    lease_duration_s: int = 40  # --node-lease-duration-seconds
    renew_s: float = 10.0  # the kubelet renews at a quarter of the lease's duration
    status_report_s: float = 300.0  # nodeStatusReportFrequency: 5 min when unchanged


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeHeartbeat:
    """One node's registration, status and Lease; `register()`, then `run(stop)`."""

    def __init__(
        self,
        api: KubeApi,
        node: str,
        address: str,
        config: HeartbeatConfig | None = None,
        devices: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.address = address
        self.config = config or HeartbeatConfig()
        # Extended resources the node's device plugins have the kubelet publish.
        self.devices = dict(devices or {})
        self.stop_event = threading.Event()
        self._uid = ""
        self._status_posted_at = 0.0

    def register(self) -> None:
        """Create the Node, or, if it is there already (a restart), set its default
        labels and post its status, as the kubelet does (updateDefaultLabels)."""
        arch = GOARCH.get(platform.machine(), platform.machine())
        labels = {
            "kubernetes.io/hostname": self.node,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node, "labels": labels},
            "status": self._status(None),
        }
        try:
            node = self.api.create_node(body)
            self._status_posted_at = time.monotonic()
        except API_ERRORS as exc:
            if status_code(exc) != ALREADY_EXISTS:
                raise
            self.api.patch_node(self.node, {"metadata": {"labels": labels}})
            node = self._post_status()
        self._uid = str(node["metadata"]["uid"])
        log.info("registered node=%s address=%s", self.node, self.address)

    def run(self, stop: threading.Event) -> None:
        """Renew the Lease and post status until `stop` or stop() is set."""
        while not (stop.is_set() or self.stop_event.is_set()):
            try:
                self._renew_lease()
                self._maybe_post_status()
            except API_ERRORS as exc:
                log.warning("heartbeat failed node=%s error=%s", self.node, exc)
            if self.stop_event.wait(self.config.renew_s):
                return

    def stop(self) -> None:
        """Stop the heartbeats (the pods run on)."""
        self.stop_event.set()

    def _status(self, current: Obj | None) -> Obj:
        """The node's status as its kubelet reports it; a condition's transition time
        kept while its status stays the same in `current` (the Node as it is now)."""
        now = _now()
        before = {c.get("type"): c for c in ((current or {}).get("conditions") or [])}

        def condition(kind: str, status: str, reason: str, message: str) -> Obj:
            old = before.get(kind) or {}
            since = old.get("lastTransitionTime") if old.get("status") == status else None
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": since or now,
            }

        conditions = [
            condition(kind, "False", reason, f"kubelet has no {kind}")
            for kind, reason in PRESSURES.items()
        ]
        ready = condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
        conditions.append(ready)
        resources = {"pods": MAX_PODS, **self.devices}
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.node},
            ],
        }

    def _post_status(self) -> Obj:
        current = self.api.get_node(self.node)
        status = self._status(current.get("status"))
        node = self.api.patch_node_status(self.node, {"status": status})
        self._status_posted_at = time.monotonic()
        return node

    def _maybe_post_status(self) -> None:
        due = time.monotonic() - self._status_posted_at >= self.config.status_report_s
        if not due:
            status: Obj = self.api.get_node(self.node).get("status") or {}
            conditions: list[Obj] = status.get("conditions") or []
            ready: Obj = next((c for c in conditions if c["type"] == "Ready"), {})
            due = ready.get("status") != "True"
        if due:
            self._post_status()

    def _renew_lease(self) -> None:
        spec = {
            "holderIdentity": self.node,
            "leaseDurationSeconds": self.config.lease_duration_s,
            "renewTime": micro_time(time.time()),
        }
        lease = self.api.get_lease(LEASE_NAMESPACE, self.node)
        if lease is not None:
            self.api.replace_lease(LEASE_NAMESPACE, {**lease, "spec": {**lease["spec"], **spec}})
            return
        owner = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self._uid}
        meta = {"name": self.node, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta}
        body["spec"] = spec
        self.api.create_lease(LEASE_NAMESPACE, body)
