"""The binaries controlplane/build.sh builds, run by gpuflow.sandbox.controlplane and
checked with the real kubectl: the pinned release answers, RBAC lets the admin in,
and the controller manager runs its controllers. Skipped only when the binaries are
not built (`make controlplane`); these tests never build them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuflow.sandbox.controlplane import Binaries, BinariesMissing, ControlPlane
from tests.waiting import wait_for

GO_MOD = Path(__file__).resolve().parents[2] / "controlplane" / "go.mod"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def _binaries() -> Binaries | None:
    try:
        return Binaries.find()
    except BinariesMissing:
        return None


BINARIES = _binaries()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BINARIES is None,
        reason="the control plane is not built: make controlplane (bash controlplane/build.sh)",
    ),
]


def pinned(module: str) -> str:
    """The version controlplane/go.mod requires `module` at."""
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", GO_MOD.read_text(), re.MULTILINE)
    assert found, f"{module} is not required in {GO_MOD}"
    return found.group(1)


class Kubectl:
    """The real kubectl with the admin's kubeconfig, its own HOME and discovery cache."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "HOME": str(home), "KUBECONFIG": str(kubeconfig)}

    def __call__(self, *args: str) -> str:
        result = subprocess.run(
            [KUBECTL, "--cache-dir", str(self.home / "cache"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("controlplane"), BINARIES) as cp:
        yield cp


@pytest.fixture(scope="module")
def kubectl(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(control_plane.kubeconfig, tmp_path_factory.mktemp("kubectl"))


def test_binaries_report_the_pinned_releases(control_plane: ControlPlane) -> None:
    assert control_plane.version == pinned("k8s.io/kubernetes")
    assert control_plane.store == "etcd " + pinned("go.etcd.io/etcd/server/v3").lstrip("v")


def test_kubectl_lists_the_namespaces(kubectl: Kubectl) -> None:
    names = kubectl("get", "namespaces", "-o", "name").split()
    assert {"namespace/default", "namespace/kube-system", "namespace/kube-public"} <= set(names)


def test_kubectl_version_names_the_pinned_release(kubectl: Kubectl) -> None:
    server = json.loads(kubectl("version", "-o", "json"))["serverVersion"]
    release = pinned("k8s.io/kubernetes")
    assert server["gitVersion"] == release
    assert (server["major"], server["minor"]) == tuple(release[1:].split(".")[:2])


def test_controller_manager_made_the_default_service_account(kubectl: Kubectl) -> None:
    assert kubectl("get", "serviceaccount", "default", "-n", "default", "-o", "name") == (
        "serviceaccount/default\n"
    )


def test_controller_manager_serves_a_new_namespace(kubectl: Kubectl) -> None:
    """Its service-account and root-CA controllers fill a namespace created now, each
    under its own service account in kube-system (--use-service-account-credentials)."""
    kubectl("create", "namespace", "fresh")

    def filled() -> bool:
        names = kubectl("get", "serviceaccounts,configmaps", "-n", "fresh", "-o", "name")
        return {"serviceaccount/default", "configmap/kube-root-ca.crt"} <= set(names.split())

    wait_for("the default ServiceAccount and kube-root-ca.crt in namespace fresh", filled)
    controllers = kubectl("get", "serviceaccounts", "-n", "kube-system", "-o", "name").split()
    assert "serviceaccount/root-ca-cert-publisher" in controllers
