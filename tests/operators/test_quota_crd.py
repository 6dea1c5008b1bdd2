"""The Quota CRD against the real control plane, with the real kubectl: the
example applies, `kubectl get quotas` shows the printer columns, and a bad quota is
refused by the name of its field (the schema's constraints; the cross-field CEL rules
are the real API server's and the operator's, see operators/quotas/tree.py). The
deprecated Queue kind is still served, and the server warns whoever uses it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from operators import crd
from tests.operators.real_cluster import RealCluster
from tests.operators.test_kubectl import KUBECTL, ROOT, kubectl

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")


def refused(cluster: RealCluster, manifest: str) -> str:
    """kubectl apply's stderr for a manifest the server must refuse."""
    cmd = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-"]
    done = subprocess.run(cmd, input=manifest, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr


def cells(header: str, row: str) -> list[str]:
    """A table row cut at its header's column starts (an empty cell stays empty)."""
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return [row[a:b].strip() for a, b in zip(starts, ends, strict=True)]


def quota(spec: str) -> str:
    return f"apiVersion: gpuflow.dev/v1alpha1\nkind: Quota\nmetadata: {{name: bad}}\nspec: {spec}\n"


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_example_applies_and_lists(gpu_cluster: RealCluster) -> None:
    assert "quotas.gpuflow.dev" in kubectl(gpu_cluster, "apply", "-f", str(crd.QUOTA_CRD_PATH))
    out = kubectl(gpu_cluster, "apply", "-f", str(ROOT / "examples" / "quotas.yaml"))
    assert out.split("\n")[:4] == [
        "quota.gpuflow.dev/research created",
        "quota.gpuflow.dev/team-a created",
        "quota.gpuflow.dev/team-b created",
        "quota.gpuflow.dev/team-c created",
    ]
    header, *rows = kubectl(gpu_cluster, "get", "quotas").splitlines()
    assert header.split() == [
        "NAME", "PARENT", "GUARANTEE", "LIMIT", "WEIGHT", "ALLOCATED", "BORROWED", "PENDING",
        "AGE",
    ]  # fmt: skip
    by_name = {r.split()[0]: cells(header, r) for r in rows}
    assert by_name["team-b"][1:5] == ["research", "38", "96", "2"]
    # The default the schema applies: weight 1; a root has no parent.
    assert by_name["research"][1:5] == ["", "128", "", "1"]
    assert by_name["team-c"][4] == "1"
    # Cluster-scoped: no namespace, and the short name and the category work.
    assert "team-a" in kubectl(gpu_cluster, "get", "gq")
    assert "quota.gpuflow.dev/team-a" in kubectl(gpu_cluster, "get", "gpuflow", "-o", "name")
    again = kubectl(gpu_cluster, "apply", "-f", str(ROOT / "examples" / "quotas.yaml"))
    assert again.count(" unchanged") == 4


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{guarantee: -1}", "spec.guarantee"),
        ("{guarantee: 4, weight: 0}", "spec.weight"),
        ("{guarantee: 4, limit: -2}", "spec.limit"),
        ("{parent: Org_A}", "spec.parent"),
        ("{tenants: ['']}", "spec.tenants[0]"),
        ("{guaranteeByModel: {A100: -4}}", "spec.guaranteeByModel.A100"),
        ("{guarantee: four}", "spec.guarantee"),
        ("{guarantee: 4, cap: 8}", 'unknown field "spec.cap"'),
    ],
)
def test_bad_quota_is_refused_by_field(gpu_cluster: RealCluster, spec: str, field: str) -> None:
    err = refused(gpu_cluster, quota(spec))
    assert field in err, err
    assert "bad" not in kubectl(gpu_cluster, "get", "quotas", "-o", "name")


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_the_deprecated_queue_kind_is_served_with_a_warning(gpu_cluster: RealCluster) -> None:
    """A cluster's old Queue objects stay readable and writable for the release, and
    kubectl prints the API server's deprecation warning, which names the migration."""
    cmd = [KUBECTL, "--kubeconfig", str(gpu_cluster.kubeconfig), "apply", "-f", "-"]
    old = quota("{guarantee: 4}").replace("kind: Quota", "kind: Queue").replace("bad", "old")
    done = subprocess.run(cmd, input=old, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "queue.gpuflow.dev/old created"
    # The server's answer itself carries the warning, naming the migration.
    answer = gpu_cluster.api.custom.list_cluster_custom_object(
        crd.GROUP, crd.VERSION, crd.LEGACY_QUEUE_PLURAL, _preload_content=False
    )
    try:
        warning = answer.headers.get("Warning", "")
    finally:
        answer.release_conn()
    assert "Queue is deprecated; use Quota" in warning and "gpuflow quotas migrate" in warning
    # kubectl prints it. One clean-clone CI run saw an apply print nothing on stderr
    # (not reproduced alone or with tests/operators); a second request is asked too.
    shown = done.stderr
    if "Warning:" not in shown:
        again = [*cmd[:3], "get", "queues", "old", "-o", "name"]
        shown = subprocess.run(again, capture_output=True, text=True, timeout=60).stderr
    assert "Warning: gpuflow.dev/v1alpha1 Queue is deprecated; use Quota" in shown
    assert "gpuflow quotas migrate" in shown
    # The Quota holds the short name now: the old kind is reached by its plural only.
    assert "old" not in kubectl(gpu_cluster, "get", "gq", "-o", "name")
    assert kubectl(gpu_cluster, "get", "queues", "-o", "name").strip() == "queue.gpuflow.dev/old"
