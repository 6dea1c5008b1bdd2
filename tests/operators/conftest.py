"""Operator test fixtures: the test API server with the DLJob CRD and GPU nodes.

Warnings are errors under pytest; the kubernetes client (32.x) itself raises none in
these tests, so no ignore is needed here (its `datetime.utcnow()` deprecation is
only hit by token refresh, which a kubeconfig without auth never runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from operators.kube import KubeApi
from tests.kube.fixtures import KubeServer, ServerOptions, kube_server
from tests.operators.builders import install_crd, make_node_body

__all__ = ["gpu_cluster", "kube_server"]


class GpuCluster:
    """A running test API server with the CRD installed and `nodes` DGX-1 nodes."""

    def __init__(self, server: KubeServer, nodes: int) -> None:
        self.server = server
        self.client = server.api_client()
        self.api = KubeApi(self.client)
        install_crd(self.client)
        for i in range(nodes):
            self.api.create_node(make_node_body(f"node-{i}", rack=f"r{i // 4}"))


@pytest.fixture
def gpu_cluster(request: Any) -> Iterator[GpuCluster]:
    nodes = getattr(request, "param", 2)
    with KubeServer(options=ServerOptions(graceful_pods=True)) as server:
        yield GpuCluster(server, nodes)
