"""Operator test fixtures: GPU clusters with the DLJob CRD and DGX-1 nodes.

`gpu_cluster` is the session's real control plane (tests/operators/real_cluster.py):
the operator's tests run against a real kube-apiserver and kube-controller-manager.
`fault_cluster` is the same on the test API server (gpuflow/sandbox/kube), kept for the
tests that need what a real server cannot be made to do on cue: fail the next request
of a verb, compact its history (410 Gone), cut watches, or count the requests it got
(docs/kube-test-server.md).

Warnings are errors under pytest; the kubernetes client (32.x) itself raises none in
these tests, so no ignore is needed here (its `datetime.utcnow()` deprecation is
only hit by token refresh, which a kubeconfig without auth never runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuflow.sandbox.controlplane import ControlPlane
from operators.kube import KubeApi
from tests.kube.fixtures import KubeServer, ServerOptions, kube_server
from tests.operators.builders import install_crd, make_node_body
from tests.operators.real_cluster import RealCluster

__all__ = ["fault_cluster", "gpu_cluster", "kube_server"]


class GpuCluster:
    """A running test API server with the CRD installed and `nodes` DGX-1 nodes."""

    def __init__(self, server: KubeServer, nodes: int) -> None:
        self.server = server
        self.kubeconfig = server.kubeconfig
        self.client = server.api_client()
        self.api = KubeApi(self.client)
        install_crd(self.client)
        for i in range(nodes):
            self.api.create_node(make_node_body(f"node-{i}", rack=f"r{i // 4}"))


@pytest.fixture
def gpu_cluster(request: Any, control_plane: ControlPlane) -> Iterator[RealCluster]:
    """The real control plane with `request.param` (default 2) DGX-1 nodes."""
    cluster = RealCluster(control_plane, getattr(request, "param", 2))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def fault_cluster(request: Any) -> Iterator[GpuCluster]:
    """The test API server with `request.param` (default 2) DGX-1 nodes."""
    nodes = getattr(request, "param", 2)
    with KubeServer(options=ServerOptions(graceful_pods=True)) as server:
        yield GpuCluster(server, nodes)
