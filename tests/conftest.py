"""Fixtures for the whole suite: the session's one real control plane
(tests/controlplane/fixtures.py), shared by every package that asks for it, and
`kube_cluster`, that control plane as a test of the API, the node agent, kubectl or
Helm needs it: the DLJob and Queue CRDs, no nodes (a test adds its own, heartbeating,
with `add_node`, or bare ones through `.api`), every object a test makes removed before
and after it (tests/operators/real_cluster.py)."""

from collections.abc import Iterator

import pytest

from gpuflow.sandbox.controlplane import ControlPlane
from tests.controlplane.fixtures import control_plane
from tests.operators.real_cluster import RealCluster

__all__ = ["control_plane", "kube_cluster"]


@pytest.fixture
def kube_cluster(control_plane: ControlPlane) -> Iterator[RealCluster]:
    """The session's real control plane with the CRDs and no nodes, reset around the test."""
    cluster = RealCluster(control_plane, 0)
    try:
        yield cluster
    finally:
        cluster.close()
