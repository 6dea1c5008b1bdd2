"""The one real control plane of a test session (gpuflow/sandbox/controlplane.py:
etcd, kube-apiserver and kube-controller-manager built from Go modules), started the
first time a test asks for `control_plane` and shared by every test package that runs
Kubernetes tests against it (tests/sandbox, tests/operators, tests/e2e, tests/api,
tests/helm, tests/gpuflow). The fixture is registered for the whole suite by
tests/conftest.py, beside `kube_cluster`; tests are skipped only where the binaries are
not built (`make controlplane`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuflow.sandbox.controlplane import (
    Binaries,
    BinariesMissing,
    ControlPlane,
    ControlPlaneOptions,
)

# Nodes whose kubelets get their own credentials (ControlPlane.node_kubeconfig).
NODES = ("node-0", "node-1", "node-2")


def control_plane_built() -> bool:
    try:
        Binaries.find()
    except BinariesMissing:
        return False
    return True


NEEDS_CONTROL_PLANE = pytest.mark.skipif(
    not control_plane_built(),
    reason="the control plane is not built: make controlplane (bash controlplane/build.sh)",
)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if not control_plane_built():
        pytest.skip("the control plane is not built: make controlplane")
    options = ControlPlaneOptions(nodes=NODES)
    with ControlPlane(tmp_path_factory.mktemp("controlplane"), options=options) as cp:
        yield cp
