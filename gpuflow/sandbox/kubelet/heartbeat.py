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
(operators/dljobs/requests.py `node_allocatable`) then leaves CPU and memory unconstrained,
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

`LeaseRenewer` is the lighter emulation bench/operator.py uses for thousands of nodes
registered once (`register(metadata)`) and then kept alive: a few threads renew every
node's Lease at the kubelet's period, spread evenly over it, each renewal one merge
patch of `renewTime` (no GET first, no status posts: the node lifecycle controller
counts a renewed Lease as the node's heartbeat).
"""

from __future__ import annotations

import json
import logging
import platform
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from operators.kube import ALREADY_EXISTS, API_ERRORS, KubeApi, Obj, status_code
from operators.kube.times import micro_time

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
        # The port of the kubelet's HTTPS server (kubelet_server.py), which the status's
        # daemonEndpoints names for the API server's proxy; 0: it serves none.
        self.kubelet_port = 0
        self._uid = ""
        self._status_posted_at = 0.0

    def register(self, metadata: Obj | None = None) -> Obj:
        """Create the Node, or, if it is there already (a restart), set its default
        labels and post its status, as the kubelet does (updateDefaultLabels).
        `metadata`'s labels and annotations (a GPU node's, which its node agent would
        publish) go into a Node it creates, beside the default labels. Returns the Node."""
        arch = GOARCH.get(platform.machine(), platform.machine())
        labels = {
            "kubernetes.io/hostname": self.node,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
        }
        extra = metadata or {}
        meta: Obj = {"name": self.node, "labels": {**(extra.get("labels") or {}), **labels}}
        if extra.get("annotations"):
            meta["annotations"] = dict(extra["annotations"])
        body = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": self._status(None)}
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
        return node

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
        status: Obj = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.node},
            ],
        }
        if self.kubelet_port:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
        return status

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
        body = node_lease(self.node, self._uid, self.config.lease_duration_s)
        lease = self.api.get_lease(LEASE_NAMESPACE, self.node)
        if lease is not None:
            spec = {**lease["spec"], **body["spec"]}
            self.api.replace_lease(LEASE_NAMESPACE, {**lease, "spec": spec})
            return
        self.api.create_lease(LEASE_NAMESPACE, body)


def node_lease(node: str, uid: str, duration_s: int) -> Obj:
    """A node's Lease in kube-node-lease as its kubelet makes it (owned by the Node),
    renewed now."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    meta = {"name": node, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]}
    spec = {
        "holderIdentity": node,
        "leaseDurationSeconds": duration_s,
        "renewTime": micro_time(time.time()),
    }
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


class LeaseRenewer:
    """Every node's Lease in kube-node-lease renewed at the kubelet's period
    (`config.renew_s`) by `threads` threads, each over its share of the nodes (those
    added so far, taken again every period: nodes may be added after start()) with
    the renewals spread evenly over the period (one thread alone cannot keep 2,000
    Leases at 200 renewals a second once each takes tens of milliseconds on a busy
    machine). `renewals` counts the patches sent (a caller subtracts them from the API
    server's counts); `longest_gap_s` is the longest a node went without one (from its
    Lease's creation on), to hold against the Lease's 40 s."""

    def __init__(
        self, api: KubeApi, config: HeartbeatConfig | None = None, threads: int = 16
    ) -> None:
        self.api = api
        self.config = config or HeartbeatConfig()
        self.renewals = 0
        self.failures = 0
        self.longest_gap_s = 0.0
        self._last: dict[str, float] = {}  # node -> when its Lease was last written
        self._threads = threads
        self._nodes: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._running: list[threading.Thread] = []

    def add(self, node: Obj) -> None:
        """Create `node`'s Lease (owned by the Node, as the kubelet makes it) and renew
        it from the renewing thread's next period on. Thread-safe."""
        name = str(node["metadata"]["name"])
        uid = str(node["metadata"]["uid"])
        self.api.create_lease(LEASE_NAMESPACE, node_lease(name, uid, self.config.lease_duration_s))
        with self._lock:
            self._last[name] = time.monotonic()
            self._nodes.append(name)

    def start(self) -> None:
        for i in range(self._threads):
            thread = threading.Thread(target=self._run, args=(i,), name=f"lease-renewer-{i}")
            thread.start()
            self._running.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._running:
            thread.join()

    def _run(self, index: int) -> None:
        client = self.api.core.api_client
        headers = _auth_headers(client)
        headers["Content-Type"] = "application/merge-patch+json"
        base = f"{client.configuration.host}/apis/coordination.k8s.io/v1/namespaces/"
        pool = client.rest_client.pool_manager
        due = time.monotonic()
        while True:
            with self._lock:
                nodes = self._nodes[index :: self._threads]
            if not nodes:  # none added yet
                due += self.config.renew_s / 10
                if self._stop.wait(max(due - time.monotonic(), 0.0)):
                    return
                continue
            gap_s = self.config.renew_s / len(nodes)
            for name in nodes:
                due += gap_s
                if self._stop.wait(max(due - time.monotonic(), 0.0)):
                    return
                patch = {"spec": {"renewTime": micro_time(time.time())}}
                resp = pool.request(
                    "PATCH",
                    f"{base}{LEASE_NAMESPACE}/leases/{name}",
                    body=json.dumps(patch).encode(),
                    headers=headers,
                    timeout=10.0,
                )
                with self._lock:
                    self.renewals += 1
                    if resp.status == 200:
                        now = time.monotonic()
                        self.longest_gap_s = max(self.longest_gap_s, now - self._last[name])
                        self._last[name] = now
                    else:
                        self.failures += 1
                if resp.status != 200:
                    log.warning("lease renewal failed node=%s status=%s", name, resp.status)


def _auth_headers(client: Any) -> dict[str, str]:
    """The headers an ApiClient authenticates with (a bearer token from the kubeconfig)."""
    settings: Mapping[str, Mapping[str, str]] = client.configuration.auth_settings()
    return {s["key"]: s["value"] for s in settings.values() if s.get("in") == "header"}
