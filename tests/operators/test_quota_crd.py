"""The Quota CRD against the real control plane, with the real kubectl: the
example applies, `kubectl get quotas` shows the printer columns, and a bad quota is
refused by the name of its field (the schema's constraints; the cross-field CEL rules
are the real API server's and the operator's, see operators/quotas/tree.py). The
deprecated Queue kind is still served, and the server warns whoever uses it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes
import pytest

from operators import crd
from tests.operators.real_cluster import RealCluster
from tests.operators.test_kubectl import KUBECTL, ROOT, kubectl
from tests.waiting import wait_for

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
    found = _as_the_chart_has_it(gpu_cluster)
    # The server's answer carries the warning, naming the migration.
    warning = wait_for("the server's deprecation warning", lambda: _warning(gpu_cluster), 15)
    assert "Queue is deprecated; use Quota" in warning, found
    assert "gpuflow quotas migrate" in warning
    cmd = [KUBECTL, "--kubeconfig", str(gpu_cluster.kubeconfig), "apply", "-f", "-"]
    old = quota("{guarantee: 4}").replace("kind: Quota", "kind: Queue").replace("bad", "old")
    done = subprocess.run(cmd, input=old, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "queue.gpuflow.dev/old created"
    # kubectl prints it, on the apply or else on a get.
    shown = done.stderr
    if "Warning:" not in shown:
        again = [*cmd[:3], "get", "queues", "old", "-o", "name"]
        shown = subprocess.run(again, capture_output=True, text=True, timeout=60).stderr
    assert "Warning: gpuflow.dev/v1alpha1 Queue is deprecated; use Quota" in shown
    assert "gpuflow quotas migrate" in shown
    # The Quota holds the short name now: the old kind is reached by its plural only.
    assert "old" not in kubectl(gpu_cluster, "get", "gq", "-o", "name")
    assert kubectl(gpu_cluster, "get", "queues", "-o", "name").strip() == "queue.gpuflow.dev/old"


def _as_the_chart_has_it(cluster: RealCluster) -> str:
    """Make the control plane's Queue CRD the chart's, and say what it was: clean-clone
    CI runs of the whole suite found the shared control plane's Queue version not
    deprecated by the time this test ran (no Warning header; not reproduced with
    tests/operators, tests/api's quota tests or tests/helm before it), so the test
    states its premise instead of inheriting one."""
    ext = kubernetes.client.ApiextensionsV1Api(cluster.client)
    body = crd.load_crd_manifest(crd.LEGACY_QUEUE_CRD_PATH)
    name = body["metadata"]["name"]
    current = ext.read_custom_resource_definition(name)
    found = f"{name} found with versions {[(v.name, v.deprecated) for v in current.spec.versions]}"
    meta = {**body["metadata"], "resourceVersion": current.metadata.resource_version}
    ext.replace_custom_resource_definition(name, {**body, "metadata": meta})
    return found


def _warning(cluster: RealCluster) -> str | None:
    """The Warning header of a LIST of Queues, or None while there is none."""
    answer = cluster.api.custom.list_cluster_custom_object(
        crd.GROUP, crd.VERSION, crd.LEGACY_QUEUE_PLURAL, _preload_content=False
    )
    try:
        return answer.headers.get("Warning") or None
    finally:
        answer.release_conn()
