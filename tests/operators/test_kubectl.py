"""The real kubectl against the real control plane with the operator running: apply, get,
describe (conditions, why pending), delete (finalizer released once pods are gone)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from operators import crd
from tests.operators.harness import job_pods, running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
BIG = """
apiVersion: gpuflow.dev/v1alpha1
kind: DLJob
metadata: {name: big, namespace: default}
spec: {image: busybox, gpus: 8, model: bert}
---
apiVersion: gpuflow.dev/v1alpha1
kind: DLJob
metadata: {name: huge, namespace: default}
spec: {image: busybox, gpus: 16, model: bert}
"""

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")


def kubectl(cluster: RealCluster, *args: str, stdin: str | None = None) -> str:
    cmd = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_kubectl_apply_get_describe_delete(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    # The CRD applies with kubectl too (the fixture created it; apply updates it).
    assert "dljobs.gpuflow.dev" in kubectl(gpu_cluster, "apply", "-f", str(crd.CRD_PATH))
    out = kubectl(gpu_cluster, "apply", "-f", str(ROOT / "examples" / "dljob.yaml"))
    assert "dljob.gpuflow.dev/resnet50 created" in out
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # runs "for ever"
    try:
        with running_operator(gpu_cluster.client):
            wait_phases(api, "Running", ["resnet50"])
            kubectl(gpu_cluster, "apply", "-f", "-", stdin=BIG)
            wait_phases(api, "Queued", ["big"])
            wait_phases(api, "Unschedulable", ["huge"])
            table = kubectl(gpu_cluster, "get", "dljobs")
            header, *rows = table.splitlines()
            assert header.split() == ["NAME", "GPUS", "ALLOCATED", "STATUS", "NODES", "AGE"]
            # ALLOCATED is blank while a job holds no GPUs.
            assert rows[0].split()[:3] == ["big", "8", "Queued"]
            assert rows[1].split()[:3] == ["huge", "16", "Unschedulable"]
            assert rows[2].split()[:5] == ["resnet50", "4", "4", "Running", "node-0"]
            assert "resnet50" in kubectl(gpu_cluster, "get", "dlj")  # the short name
            described = kubectl(gpu_cluster, "describe", "dljob", "big")
            assert "InsufficientGpus" in described
            assert "needs 8 GPUs; 4 are free" in described
            described = kubectl(gpu_cluster, "describe", "dljob", "huge")
            assert "needs 16 GPUs; the cluster has 8 on 1 node(s)" in described
            running = kubectl(gpu_cluster, "describe", "dljob", "resnet50")
            assert "WorkersRunning" in running and "Scheduled" in running
            kubectl(gpu_cluster, "delete", "dljob", "resnet50", "--timeout=30s")
            assert not job_pods(api, "resnet50")
            assert "resnet50" not in kubectl(gpu_cluster, "get", "dljobs")
    finally:
        kubelet.stop()


MALFORMED = {
    "negative GPUs": ("spec: {image: busybox, gpus: -2}", "spec.gpus"),
    "minGpus > maxGpus": (
        "spec: {image: busybox, gpus: 2, minGpus: 4, maxGpus: 3}",
        "spec.minGpus",
    ),
    "neither template nor image": ("spec: {gpus: 2}", "spec.template"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_kubectl_apply_of_a_malformed_dljob_is_refused_naming_the_field(
    gpu_cluster: RealCluster, case: str
) -> None:
    """kube-apiserver itself refuses it (the CRD's schema and CEL rules): kubectl exits
    non-zero naming the field, and nothing is stored."""
    spec, field = MALFORMED[case]
    manifest = f"apiVersion: {crd.API_VERSION}\nkind: DLJob\nmetadata: {{name: bad}}\n{spec}\n"
    cmd = [KUBECTL, "--kubeconfig", str(gpu_cluster.kubeconfig), "apply", "-f", "-"]
    done = subprocess.run(cmd, input=manifest, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert 'The DLJob "bad" is invalid' in done.stderr and f"{field}:" in done.stderr, done.stderr
    assert gpu_cluster.api.list_dljobs("default")[0] == []
