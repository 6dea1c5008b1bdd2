"""Fixtures for the sandbox's tests: a strict API server whose pods wait for their
kubelet on delete (graceful_pods), a KubeApi on it, ProcessKubelets; `make_pod`,
`status`, `wait_phase` and `gone` for the tests that use them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.network import LOOPBACK, NodeNetwork
from operators.kube import KubeApi

Start = Callable[..., ProcessKubelet]


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(options=ServerOptions(graceful_pods=True)) as s:
        yield s


@pytest.fixture
def api(server: KubeServer) -> KubeApi:
    return KubeApi(server.api_client())


@pytest.fixture
def kubelet(api: KubeApi, tmp_path: Path) -> Iterator[Callable[..., ProcessKubelet]]:
    """Start a ProcessKubelet for a node (on loopback unless a network is given)."""
    started: list[ProcessKubelet] = []

    def start(node: str = "node-0", network: NodeNetwork | None = None) -> ProcessKubelet:
        net = network or NodeNetwork("test", False, addresses={node: LOOPBACK})
        k = ProcessKubelet(api, node, net, tmp_path / "sandbox").start()
        started.append(k)
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
