"""The rendered chart against the real kubectl (1.32) and the session's real control
plane (`kube_cluster`, tests/conftest.py):

- the CRDs, the ConfigMap and the Services are applied with `kubectl apply -f` into the
  chart's namespace (made for the test, deleted after it), a DLJob
  (examples/dljob.yaml) is created through the CRD and the example Quotas too;
- every kind of every variant is applied with `--dry-run=server`: the real
  kube-apiserver decodes, defaults and validates each object (kubectl asks for strict
  field validation, so an unknown field is refused) and stores nothing;
- workloads and role bindings are also decoded by kubectl into its compiled-in Go
  types with `kubectl set env --local` / `kubectl set subject --local`, which need no
  server: a wrong type fails the decode, and a field the types do not know is
  dropped, so the output must contain everything the input had.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuflow.sandbox.controlplane import ControlPlane
from tests.helm.chart import NAMESPACE, ROOT, VARIANTS, Manifests, Obj, name
from tests.operators.real_cluster import RealCluster

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
Render = Callable[..., Manifests]
SERVED = ("CustomResourceDefinition", "ConfigMap", "Service")


def kubectl(
    workdir: Path,
    *args: str,
    kubeconfig: Path | None = None,
    stdin: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = {**os.environ, "HOME": str(workdir)}
    # --local commands must not need a cluster: point them at none.
    env["KUBECONFIG"] = str(kubeconfig or workdir / "no-such-kubeconfig")
    result = subprocess.run(
        [KUBECTL, "--cache-dir", str(workdir / "cache"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0 or not check, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


def missing(given: Any, decoded: Any, path: str = "") -> list[str]:
    """Paths of `given` that `decoded` lacks or holds with another value."""
    if isinstance(given, dict):
        if not isinstance(decoded, dict):
            return [path]
        return [
            p
            for key, value in given.items()
            for p in ([f"{path}.{key}"] if key not in decoded else [])
            or missing(value, decoded[key], f"{path}.{key}")
        ]
    if isinstance(given, list):
        if not isinstance(decoded, list) or len(decoded) < len(given):
            return [f"{path}[]"]
        return [p for i, v in enumerate(given) for p in missing(v, decoded[i], f"{path}[{i}]")]
    return [] if given == decoded else [f"{path}: {given!r} -> {decoded!r}"]


def as_list(docs: list[Obj]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})


@pytest.fixture(scope="module")
def chart_namespace(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The chart's namespace on the real control plane for this module's tests (its
    deletion takes the namespace controller seconds), deleted with what they put in it
    after them; yields the admin's kubeconfig."""
    kc, workdir = control_plane.kubeconfig, tmp_path_factory.mktemp("namespace")
    kubectl(workdir, "create", "namespace", NAMESPACE, kubeconfig=kc)
    try:
        yield kc
    finally:
        kubectl(workdir, "delete", "namespace", NAMESPACE, "--wait=false", kubeconfig=kc)


def test_served_kinds_apply_and_the_crd_takes_a_dljob(
    render: Render, kube_cluster: RealCluster, chart_namespace: Path, tmp_path: Path
) -> None:
    m = render()
    kc = chart_namespace
    served = [d for d in m if d["kind"] in SERVED]
    # The ConfigMaps: the policy's and the Grafana dashboard's.
    assert sorted(d["kind"] for d in served) == [
        "ConfigMap", "ConfigMap", "CustomResourceDefinition", "CustomResourceDefinition",
        "CustomResourceDefinition", "Service", "Service", "Service",
    ]  # fmt: skip
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump_all(served))
    out = kubectl(tmp_path, "apply", "-f", str(path), kubeconfig=kc).stdout.splitlines()
    # The CRDs are there already (kube_cluster installs them as the chart does): apply
    # records its last-applied configuration on them; the rest is new.
    assert [line.rsplit(" ", 1)[1] for line in out] == [
        "configured" if d["kind"] == "CustomResourceDefinition" else "created" for d in served
    ], out
    assert kubectl(tmp_path, "apply", "-f", str(path), kubeconfig=kc).stdout.count(
        " unchanged"
    ) == len(served)
    api = json.loads(
        kubectl(tmp_path, "-n", NAMESPACE, "get", "service", name("api"), "-o", "json",
                kubeconfig=kc).stdout
    )  # fmt: skip
    assert api["spec"]["clusterIP"] and api["spec"]["ports"][0]["targetPort"] == "http"
    job = kubectl(tmp_path, "apply", "-f", str(ROOT / "examples" / "dljob.yaml"), kubeconfig=kc)
    assert job.stdout.strip() == "dljob.gpuflow.dev/resnet50 created"
    table = kubectl(tmp_path, "get", "dlj", kubeconfig=kc).stdout.split()
    header = ["NAME", "GPUS", "ALLOCATED", "STATUS", "NODES", "AGE"]
    assert table[:6] == header and "resnet50" in table
    quotas = kubectl(tmp_path, "apply", "-f", str(ROOT / "examples" / "quotas.yaml"), kubeconfig=kc)
    lines = quotas.stdout.splitlines()
    assert len(lines) == 4 and all(
        ln.startswith("quota.gpuflow.dev/") and ln.endswith(" created") for ln in lines
    ), quotas.stdout


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_kind_passes_the_real_servers_validation(
    render: Render, chart_namespace: Path, tmp_path: Path, variant: str
) -> None:
    docs = list(render(**VARIANTS[variant]))
    path = tmp_path / "chart.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    out = kubectl(
        tmp_path, "apply", "--dry-run=server", "-f", str(path), kubeconfig=chart_namespace
    ).stdout.splitlines()
    assert len(out) == len(docs) and all(line.endswith(" (server dry run)") for line in out), out


@pytest.mark.parametrize("variant", VARIANTS)
def test_workloads_decode_into_kubectls_types(render: Render, tmp_path: Path, variant: str) -> None:
    workloads = [
        d for d in render(**VARIANTS[variant])
        if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")
    ]  # fmt: skip
    out = kubectl(
        tmp_path, "set", "env", "--local", "-f", "-", "-o", "yaml", "GPUFLOW_TYPECHECK=1",
        stdin=as_list(workloads),
    ).stdout  # fmt: skip
    decoded = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in decoded] == [d["kind"] for d in workloads]
    for given, typed in zip(workloads, decoded, strict=True):
        assert missing(given, typed) == [], given["metadata"]["name"]


@pytest.mark.parametrize("variant", ["default", "local-api"])
def test_role_bindings_decode_into_kubectls_types(
    render: Render, tmp_path: Path, variant: str
) -> None:
    bindings = render(**VARIANTS[variant]).of_kind("ClusterRoleBinding")
    out = kubectl(
        tmp_path, "set", "subject", "--local", "-f", "-", "-o", "yaml", "--user=typecheck",
        stdin=as_list(bindings),
    ).stdout  # fmt: skip
    decoded = [d for d in yaml.safe_load_all(out) if d]
    assert len(decoded) == len(bindings) == (2 if variant == "local-api" else 3)
    for given, typed in zip(bindings, decoded, strict=True):
        assert missing(given, typed) == [], given["metadata"]["name"]


MISSPELLED: Obj = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "x"},
    "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"hostNetwerk": True, "containers": [{"name": "c", "image": "i"}]},
        },
    },
}


def test_the_check_catches_a_misspelled_field(tmp_path: Path) -> None:
    """The proof above is worth something: kubectl's types drop an unknown field."""
    bad = MISSPELLED
    out = kubectl(
        tmp_path, "set", "env", "--local", "-f", "-", "-o", "yaml", "X=1", stdin=json.dumps(bad)
    ).stdout
    assert missing(bad, yaml.safe_load(out)) == [".spec.template.spec.hostNetwerk"]


def test_the_server_refuses_a_misspelled_field(chart_namespace: Path, tmp_path: Path) -> None:
    """The server dry run above is worth something: an unknown field is refused."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(MISSPELLED))
    args = ("apply", "--dry-run=server", "-n", NAMESPACE, "-f", str(path))
    result = kubectl(tmp_path, *args, kubeconfig=chart_namespace, check=False)
    assert result.returncode == 1
    assert 'unknown field "spec.template.spec.hostNetwerk"' in result.stderr, result.stderr
