"""Operator tests on the session's real control plane (tests/controlplane/fixtures.py):
the DLJob and Queue CRDs installed once, GPU Nodes made for each test, each with a
kubelet's heartbeat (gpuflow/sandbox/kubelet/heartbeat.py: Ready status and a Lease renewed in
kube-node-lease, else the node lifecycle controller takes the node for lost, the more
so as it remembers a node of the same name from an earlier test), and everything a
test made (DLJobs, Queues, pods, services, events, ConfigMaps, Secrets, Leases, Nodes)
removed before and after it, so that tests sharing the one kube-apiserver see none of
each other's objects. Used by tests/operators/conftest.py's `gpu_cluster` and
tests/api/conftest.py's `kube_cluster` (the API's cluster-mode tests, which add their
own nodes with `add_node`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuflow.sandbox.controlplane import ControlPlane
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.kubelet.heartbeat import NodeHeartbeat
from gpuflow.sandbox.kubelet.pki import write_kubelet_serving
from gpuflow.sandbox.network import LOOPBACK, NodeNetwork
from operators import crd
from operators.kube import (
    NOT_FOUND,
    ApiException,
    KubeApi,
    Obj,
    Resource,
    api_client,
)
from operators.kube.calls import drain
from tests.operators.builders import install_crd, make_node_body

NAMESPACE = "default"
# What the control plane itself keeps in a namespace: left alone.
SYSTEM_CONFIGMAPS = "metadata.name!=kube-root-ca.crt"
NO_FINALIZERS = {"metadata": {"finalizers": None}}


class RealCluster:
    """The admin's client on the real control plane, with `nodes` DGX-1 nodes (racks of
    four, as the test server's GpuCluster has them)."""

    def __init__(self, control_plane: ControlPlane, nodes: int) -> None:
        self.kubeconfig: Path = control_plane.kubeconfig
        self.control_plane = control_plane
        self.client = api_client(str(self.kubeconfig))
        self.api = KubeApi(self.client)
        ensure_crds(self.client)
        reset(self.api)
        self._heartbeats: list[tuple[NodeHeartbeat, threading.Thread]] = []
        self._kubelets: list[ProcessKubelet] = []
        for i in range(nodes):
            self.add_node(f"node-{i}", rack=f"r{i // 4}")

    def api_client(self) -> Any:
        """The admin's client (the test server's `KubeServer.api_client()` surface);
        closed by close()."""
        return self.client

    def add_node(
        self,
        name: str,
        rack: str = "r0",
        annotations: dict[str, str] | None = None,
        node_type: str = "dgx1-v100",
    ) -> Obj:
        """A Node of `node_type` (a DGX-1) with `annotations` beside the GPU ones,
        heartbeating until close()."""
        body = make_node_body(name, node_type, rack=rack)
        body["metadata"]["annotations"].update(annotations or {})
        node = self.api.create_node(body)
        self._beat(name, body["status"]["capacity"])
        return node

    def add_process_node(self, name: str, directory: Path, rack: str = "r0") -> ProcessKubelet:
        """A DGX-1 Node whose kubelet is a ProcessKubelet (gpuflow/sandbox/kubelet.py) with
        the node's own credentials (`name` one of the control plane's nodes): it runs the
        pods bound to it as processes under `directory` and serves their logs on
        loopback (`kubectl logs`, the API's job logs) until close()."""
        body = make_node_body(name, rack=rack)
        self.api.create_node(body)
        node_api = KubeApi(api_client(str(self.control_plane.node_kubeconfig(name))))
        kubelet = ProcessKubelet(
            node_api,
            name,
            NodeNetwork("real", False, addresses={name: LOOPBACK}),
            directory,
            dns_api=self.api,
            devices=body["status"]["capacity"],
            tls=write_kubelet_serving(self.control_plane.ca_file.parent, name, LOOPBACK),
        )
        self._kubelets.append(kubelet.start())
        return kubelet

    def _beat(self, node: str, devices: dict[str, str]) -> None:
        """Register `node` as its kubelet would (status Ready, the GPUs its device
        plugin publishes) and renew its Lease until close()."""
        heartbeat = NodeHeartbeat(self.api, node, LOOPBACK, devices=devices)
        heartbeat.register()
        thread = threading.Thread(target=heartbeat.run, args=(heartbeat.stop_event,))
        thread.start()
        self._heartbeats.append((heartbeat, thread))

    def close(self) -> None:
        for kubelet in self._kubelets:
            kubelet.stop()
        for heartbeat, _ in self._heartbeats:
            heartbeat.stop()
        for _, thread in self._heartbeats:
            thread.join()
        reset(self.api)
        self.client.last_response = None
        self.client.rest_client.pool_manager.clear()


def ensure_crds(client: Any) -> None:
    """The CRDs as the chart installs them, once per control plane: each one that
    another test's cluster on the same control plane has not installed already."""
    install_crd(client, exist_ok=True)


def reset(api: KubeApi) -> None:
    """Remove every object an operator test makes. DLJobs, Quotas and Queues lose their
    finalizers first (no operator is left to run them); pods go at once (grace 0)."""
    custom, core, group, version = api.custom, api.core, crd.GROUP, crd.VERSION
    jobs, _ = api.list_objects(Resource(crd.PLURAL))
    for ns in {j["metadata"]["namespace"] for j in jobs} | {NAMESPACE}:
        for job in (j for j in jobs if j["metadata"]["namespace"] == ns):
            name = job["metadata"]["name"]
            call(custom.patch_namespaced_custom_object, group, version, ns, crd.PLURAL, name,
                 NO_FINALIZERS)  # fmt: skip
        call(custom.delete_collection_namespaced_custom_object, group, version, ns, crd.PLURAL)
    for plural in (crd.QUOTA_PLURAL, crd.LEGACY_QUEUE_PLURAL):
        quotas, _ = api.list_objects(Resource(plural))
        for quota in quotas:
            name = quota["metadata"]["name"]
            call(custom.patch_cluster_custom_object, group, version, plural, name,
                 NO_FINALIZERS)  # fmt: skip
        call(custom.delete_collection_cluster_custom_object, group, version, plural)
    call(core.delete_collection_namespaced_pod, NAMESPACE, grace_period_seconds=0)
    for svc in core.list_namespaced_service(NAMESPACE).items:
        if svc.metadata.name != "kubernetes":
            call(core.delete_namespaced_service, svc.metadata.name, NAMESPACE)
    call(core.delete_collection_namespaced_event, NAMESPACE)
    call(core.delete_collection_namespaced_secret, NAMESPACE)
    call(core.delete_collection_namespaced_config_map, NAMESPACE, field_selector=SYSTEM_CONFIGMAPS)
    call(api.coordination.delete_collection_namespaced_lease, NAMESPACE)
    call(core.delete_collection_node)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """`fn(*args, **kwargs)` with its answer read to the end; an object gone meanwhile
    (a Service collected with its DLJob) is fine."""
    try:
        drain(fn(*args, **kwargs, _preload_content=False))
    except ApiException as exc:
        if exc.status != NOT_FOUND:
            raise
