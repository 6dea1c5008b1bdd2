"""Fixtures for the sandbox's tests: on the session's real control plane
(tests/controlplane/fixtures.py, with credentials for its NODES), a KubeApi on it with the admin's
credentials that force-deletes the test's pods after it, ProcessKubelets with their
node's own credentials; `make_pod`, `status`, `wait_phase` and `gone` for the tests
that use them. Skipped only where the control plane's binaries are not built."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.controlplane import ControlPlane
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.kubelet.heartbeat import HeartbeatConfig
from gpuflow.sandbox.kubelet.pki import write_kubelet_serving
from gpuflow.sandbox.network import LOOPBACK, NodeNetwork
from operators.kube import KubeApi, api_client

Start = Callable[..., ProcessKubelet]


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[KubeApi]:
    """The admin's KubeApi; the test's pods in `default` are deleted for good after it,
    so that the next test's kubelet of the same node starts from none."""
    client = KubeApi(api_client(str(control_plane.kubeconfig)))
    yield client
    for pod in client.core.list_namespaced_pod("default").items:
        client.delete_pod("default", pod.metadata.name, 0)


@pytest.fixture
def kubelet(
    control_plane: ControlPlane, api: KubeApi, tmp_path: Path
) -> Iterator[Callable[..., ProcessKubelet]]:
    """Start a ProcessKubelet for a node of NODES, with that node's credentials (on
    loopback unless a network is given), publishing `devices` (extended resources) as
    a device plugin has the kubelet do, serving its pods' logs if `serve_logs`."""
    started: list[ProcessKubelet] = []

    def start(
        node: str = "node-0",
        network: NodeNetwork | None = None,
        heartbeat: HeartbeatConfig | None = None,
        plane: ControlPlane | None = None,
        devices: dict[str, str] | None = None,
        serve_logs: bool = False,
    ) -> ProcessKubelet:
        net = network or NodeNetwork("test", False, addresses={node: LOOPBACK})
        plane_dir = (plane or control_plane).ca_file.parent
        tls = write_kubelet_serving(plane_dir, node, net.address(node)) if serve_logs else None
        node_api = KubeApi(api_client(str((plane or control_plane).node_kubeconfig(node))))
        k = ProcessKubelet(
            node_api,
            node,
            net,
            tmp_path / "sandbox",
            heartbeat=heartbeat,
            dns_api=api,
            devices=devices,
            tls=tls,
        )
        started.append(k.start())
        return k

    yield start
    for k in started:
        k.stop()


def make_pod(
    name: str,
    code: str,
    *,
    node: str = "node-0",
    env: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    grace_s: int = 30,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose worker runs `python -c code` on `node`."""
    worker: dict[str, Any] = {
        "name": "worker",
        "image": "ignored",
        "command": ["python", "-c", code],
        "env": env or [],
        "volumeMounts": mounts or [],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace_s,
            "containers": [worker],
            "volumes": volumes or [],
        },
    }


def status(api: KubeApi, name: str) -> dict[str, Any]:
    pod = api.core.read_namespaced_pod(name, "default", _preload_content=False)
    return dict(json.loads(pod.data).get("status") or {})


def wait_phase(api: KubeApi, name: str, phase: str, timeout_s: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = status(api, name)
        if st.get("phase") == phase:
            return st
        time.sleep(0.05)
    raise AssertionError(f"{name} never {phase}: {status(api, name)}")


def gone(api: KubeApi, name: str, timeout_s: float) -> float:
    """Seconds until the pod is deleted for good."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        names = [p.metadata.name for p in api.core.list_namespaced_pod("default").items]
        if name not in names:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{name} still there after {timeout_s} s")
