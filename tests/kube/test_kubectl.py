"""The test API server driven by the real `kubectl` binary (skipped if it is not installed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer
from operators import crd
from tests.kube.samples import GROUP, PLURAL, VERSION, dljob_crd, make_dljob, make_event, make_pod

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
NS = "default"


class Kubectl:
    """Runs kubectl against one server with its own discovery cache and HOME."""

    def __init__(self, server: KubeServer, workdir: Path) -> None:
        self.server = server
        self.workdir = workdir
        self.env = {**os.environ, "HOME": str(workdir), "KUBECONFIG": str(server.kubeconfig)}

    def command(self, *args: str) -> list[str]:
        assert KUBECTL is not None
        return [KUBECTL, "--cache-dir", str(self.workdir / "cache"), *args]

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
            check=False,
        )
        if ok and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def write(self, name: str, *docs: dict[str, Any]) -> str:
        path = self.workdir / name
        path.write_text(yaml.safe_dump_all(docs))
        return str(path)


@pytest.fixture
def kubectl(kube_server: KubeServer, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_server, tmp_path)


@pytest.fixture
def applied(kubectl: Kubectl) -> Iterator[Kubectl]:
    """The DLJob CRD and one DLJob `train` (2 GPUs, app=x), both via `kubectl apply -f`."""
    out = kubectl("apply", "-f", kubectl.write("crd.yaml", dljob_crd())).stdout
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/dljobs.gpuflow.dev created"
    job = make_dljob("train", gpus=2, labels={"app": "x"}, hints={"ckpt": "/ckpt"})
    out = kubectl("apply", "-f", kubectl.write("job.yaml", job)).stdout
    assert out.strip() == "dljob.gpuflow.dev/train created"
    yield kubectl


def custom_api(server: KubeServer) -> Any:
    return client.CustomObjectsApi(server.api_client())


def test_get_shows_printer_columns_via_short_name(
    kube_server: KubeServer, applied: Kubectl
) -> None:
    custom_api(kube_server).patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "train", {"status": {"phase": "Running"}}
    )
    lines = applied("get", "dlj").stdout.splitlines()
    assert lines[0].split() == ["NAME", "GPUS", "STATUS", "AGE"]
    assert lines[1].split()[:3] == ["train", "2", "Running"]
    assert lines[1].split()[3].endswith("s")
    listed = json.loads(applied("get", "dljobs", "-o", "json").stdout)
    (item,) = listed["items"]
    assert item["metadata"]["name"] == "train" and item["spec"]["queue"] == "default"
    wide = applied("get", "dljob", "train", "-o", "jsonpath={.spec.gpus}").stdout
    assert wide == "2"


def test_describe_shows_fields_and_events(kube_server: KubeServer, applied: Kubectl) -> None:
    job = custom_api(kube_server).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "train")
    client.CoreV1Api(kube_server.api_client()).create_namespaced_event(
        NS, make_event("train.1", job, "Pending", "waiting for 2 free GPUs on one node")
    )
    out = applied("describe", "dljob", "train").stdout
    assert "Name:         train" in out and "Kind:         DLJob" in out
    spec = out[out.index("Spec:") : out.index("Events:")].split()
    assert spec[spec.index("Gpus:") + 1] == "2" and spec[spec.index("Queue:") + 1] == "default"
    events = out[out.index("Events:") :]
    assert "Pending" in events and "waiting for 2 free GPUs on one node" in events
    assert "gpuflow-operator" in events


def test_apply_again_is_a_three_way_merge_patch(kube_server: KubeServer, applied: Kubectl) -> None:
    custom = custom_api(kube_server)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "train", {"metadata": {"labels": {"added-by": "operator"}}}
    )
    changed = make_dljob("train", gpus=4, labels={"app": "x"})  # gpus changed, hints dropped
    out = applied("apply", "-f", applied.write("job.yaml", changed)).stdout
    assert out.strip() == "dljob.gpuflow.dev/train configured"
    job = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "train")
    assert job["spec"]["gpus"] == 4 and "hints" not in job["spec"]
    assert job["metadata"]["labels"] == {"app": "x", "added-by": "operator"}
    assert job["metadata"]["generation"] == 2
    patches = [r for r in kube_server.requests if r.method == "PATCH"]
    assert patches[-1].content_type == "application/merge-patch+json"
    assert "fieldValidation=Strict" in patches[-1].path
    out = applied("apply", "-f", applied.write("job.yaml", changed)).stdout
    assert out.strip() == "dljob.gpuflow.dev/train unchanged"


def test_reapplying_a_pod_uses_a_strategic_merge_patch(
    kube_server: KubeServer, kubectl: Kubectl
) -> None:
    pod = make_pod("p", {"app": "x"})
    kubectl("apply", "-f", kubectl.write("pod.yaml", pod))
    pod["metadata"]["labels"] = {"app": "z"}
    pod["spec"]["containers"][0]["image"] = "busybox:1.36"
    assert (
        kubectl("apply", "-f", kubectl.write("pod.yaml", pod)).stdout.strip() == "pod/p configured"
    )
    assert kube_server.requests[-1].content_type == "application/strategic-merge-patch+json"
    live = client.CoreV1Api(kube_server.api_client()).read_namespaced_pod("p", NS)
    assert live.metadata.labels == {"app": "z"}
    assert live.spec.containers[0].image == "busybox:1.36"
    assert [e.name for e in live.spec.containers[0].env] == ["RANK"]


def test_delete_waits_for_finalizers(kube_server: KubeServer, applied: Kubectl) -> None:
    custom = custom_api(kube_server)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "train", {"metadata": {"finalizers": ["gpuflow.dev/cleanup"]}}
    )
    deleting = applied.popen("delete", "dljob", "train", "--timeout=20s")

    def terminating() -> bool:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "train")
        return bool(job["metadata"].get("deletionTimestamp"))

    kube_server.wait_for(terminating, timeout_s=10)
    time.sleep(0.3)
    assert deleting.poll() is None  # kubectl still waits on its watch
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "train", {"metadata": {"finalizers": None}}
    )
    out, err = deleting.communicate(timeout=20)
    assert deleting.returncode == 0, err
    assert out.strip() == 'dljob.gpuflow.dev "train" deleted'
    assert "No resources found" in applied("get", "dlj").stderr


def test_get_pods_with_label_selectors(kube_server: KubeServer, kubectl: Kubectl) -> None:
    core = client.CoreV1Api(kube_server.api_client())
    for name, labels in [
        ("a", {"app": "x", "tier": "gpu"}),
        ("b", {"app": "x"}),
        ("c", {"app": "y"}),
    ]:
        core.create_namespaced_pod(NS, make_pod(name, labels))
    core.patch_namespaced_pod_status("a", NS, {"status": {"phase": "Running"}})
    lines = kubectl("get", "pods", "-l", "app=x").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["a", "0/1", "Running"],
        ["b", "0/1", "Pending"],
    ]
    assert kubectl("get", "pods", "-l", "app!=x", "-o", "name").stdout.split() == ["pod/c"]
    assert kubectl("get", "pods", "-l", "tier in (gpu,cpu)", "-o", "name").stdout.split() == [
        "pod/a"
    ]
    assert kubectl(
        "get", "pods", "--field-selector", "status.phase=Pending", "-o", "name"
    ).stdout.split() == ["pod/b", "pod/c"]


def test_patch_merge_and_status_subresource(kube_server: KubeServer, applied: Kubectl) -> None:
    applied("patch", "dljob", "train", "--type=merge", "-p", '{"spec":{"gpus":3}}')
    applied(
        "patch",
        "dljob",
        "train",
        "--type=merge",
        "--subresource=status",
        "-p",
        '{"status":{"phase":"Admitted"}}',
    )
    applied("patch", "dljob", "train", "--type=merge", "-p", '{"status":{"phase":"Ignored"}}')
    job = custom_api(kube_server).get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "train")
    assert job["spec"]["gpus"] == 3 and job["status"] == {"phase": "Admitted"}
    assert applied("get", "dlj", "train", "--no-headers").stdout.split()[:3] == [
        "train",
        "3",
        "Admitted",
    ]


def test_invalid_objects_are_rejected_naming_the_field(applied: Kubectl) -> None:
    bad = applied("apply", "-f", applied.write("bad.yaml", make_dljob("bad", gpus=0)), ok=False)
    assert bad.returncode != 0
    assert (
        'The DLJob "bad" is invalid: spec.gpus: Invalid value: 0: spec.gpus in body should '
        "be greater than or equal to 1"
    ) in bad.stderr
    unknown = applied(
        "apply", "-f", applied.write("unknown.yaml", make_dljob("odd", bogus=1)), ok=False
    )
    assert unknown.returncode != 0
    assert 'strict decoding error: unknown field "spec.bogus"' in unknown.stderr
    bad_patch = applied(
        "patch", "dljob", "train", "--type=merge", "-p", '{"spec":{"gpus":-1}}', ok=False
    )
    assert "spec.gpus in body should be greater than or equal to 1" in bad_patch.stderr


def test_server_side_apply(kube_server: KubeServer, kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "-f", kubectl.write("crd.yaml", dljob_crd()))
    out = kubectl(
        "apply", "--server-side", "-f", kubectl.write("job.yaml", make_dljob("ssa", gpus=2))
    ).stdout
    assert out.strip() == "dljob.gpuflow.dev/ssa serverside-applied"
    assert kubectl("get", "dlj", "ssa", "--no-headers").stdout.split()[:2] == ["ssa", "2"]


def test_what_kubectl_asks_for(kube_server: KubeServer, applied: Kubectl) -> None:
    applied("get", "dlj")
    paths = {r.path.split("?")[0] for r in kube_server.requests}
    assert {
        "/api",
        "/apis",
        "/api/v1",
        f"/apis/{GROUP}/{VERSION}",
        "/openapi/v3",
        f"/openapi/v3/apis/{GROUP}/{VERSION}",
    } <= paths
    assert "/openapi/v2" not in paths
    aggregated = [r for r in kube_server.requests if "as=APIGroupDiscoveryList" in r.accept]
    assert aggregated  # asked for, answered with the legacy format it falls back to
    tables = [r for r in kube_server.requests if "as=Table" in r.accept]
    assert tables[-1].path == f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}?limit=500"


def test_a_deprecated_crd_version_warns_as_the_real_server_does(kubectl: Kubectl) -> None:
    """The deprecated Queue kind (helm/gpuflow/crds/queue.yaml): every request on it
    carries the version's deprecationWarning, which kubectl prints on stderr, as
    tests/operators/test_quota_crd.py sees the real kube-apiserver do; Quotas do not."""
    for path in (crd.LEGACY_QUEUE_CRD_PATH, crd.QUOTA_CRD_PATH):
        kubectl("apply", "-f", str(path))
    warning = (
        "Warning: gpuflow.dev/v1alpha1 Queue is deprecated; use Quota (quotas.gpuflow.dev):"
        " gpuflow quotas migrate copies Queues to Quotas"
    )
    old = {"apiVersion": crd.API_VERSION, "kind": "Queue", "metadata": {"name": "old"},
           "spec": {"guarantee": 4}}  # fmt: skip
    done = kubectl("apply", "-f", kubectl.write("old.yaml", old))
    assert done.stdout.strip() == "queue.gpuflow.dev/old created"
    assert done.stderr.strip() == warning
    assert kubectl("get", "queues", "-o", "name").stderr.strip() == warning
    new = {**old, "kind": "Quota"}
    done = kubectl("apply", "-f", kubectl.write("new.yaml", new))
    assert (done.stdout.strip(), done.stderr) == ("quota.gpuflow.dev/old created", "")
