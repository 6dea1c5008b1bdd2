"""`helm install` of the chart into a real control plane, the example DLJob trained to
Succeeded by the chart's own operator, agent and API.

The control plane is the tests' shared one (tests/sandbox/conftest.py `control_plane`:
etcd, kube-apiserver with RBAC and service-account tokens, kube-controller-manager,
kube-scheduler); one process kubelet (gpuflow/sandbox/kubelet.py) plays node-0 with
its own credentials, labelled as GPU Feature Discovery labels a GPU node, with the
device plugin's 4 `nvidia.com/gpu`. Helm installs the chart (CRDs, RBAC, the
migration hook Job, the operator and API Deployments, the agent DaemonSet) into a
namespace of its own, against this machine's PostgreSQL (a database created for the
test) and Redis; the controller manager makes the pods, the scheduler binds them, the
kubelet runs them as processes, each with its own ServiceAccount's token, so every
request they make is judged by the chart's RBAC. Then `kubectl apply -f
examples/train/dljob.yaml` must train to Succeeded, and the chart's API must list the
job (it follows DLJobs through its ServiceAccount) and serve the dashboard.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from controller.spec.types import GENERIC_GPU, GENERIC_NIC_GBPS
from gpuflow.sandbox.controlplane import ControlPlane
from gpuflow.sandbox.kubelet import ProcessKubelet
from gpuflow.sandbox.network import LOOPBACK, NodeNetwork
from gpuflow.sandbox.service import free_port
from operators import crd
from operators.kube import KubeApi, api_client
from tests.helm.chart import CHART, ROOT, Helm

pytestmark = pytest.mark.slow

NODE = "node-0"
GPUS = 4
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
EXAMPLE = ROOT / "examples" / "train" / "dljob.yaml"
INSTALL_TIMEOUT_S = 120
TRAIN_TIMEOUT_S = 120
# GPU Feature Discovery's label, which the chart's agent DaemonSet selects.
GPU_LABEL = "nvidia.com/gpu.present"


def kubectl(cp: ControlPlane, *args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={cp.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own for the chart's API (its migration Job creates the
    tables), dropped after the test."""
    name = f"gpuflow_helm_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def node(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ProcessKubelet]:
    """node-0's kubelet (on loopback: the pods reach this machine's PostgreSQL and
    Redis at 127.0.0.1), its Node labelled as a GPU node."""
    network = NodeNetwork("helm", False, addresses={NODE: LOOPBACK})
    node_api = KubeApi(api_client(str(control_plane.node_kubeconfig(NODE))))
    admin = KubeApi(api_client(str(control_plane.kubeconfig)))
    kubelet = ProcessKubelet(
        node_api,
        NODE,
        network,
        tmp_path / "sandbox",
        dns_api=admin,
        devices={crd.RESOURCE_GPU: str(GPUS)},
    ).start()
    admin.patch_node(NODE, {"metadata": {"labels": {GPU_LABEL: "true"}}})
    yield kubelet
    kubelet.stop()


def topology(path: Path) -> Path:
    """The agent's node type (`agent run --topology-file`): no NVML here."""
    node_type = {"gpu": GENERIC_GPU, "gpus": GPUS, "nic_gbps": GENERIC_NIC_GBPS}
    path.write_text(yaml.safe_dump({"node_types": {"sandbox": node_type}}))
    return path


def values(database: str, api_port: int, topology_file: Path) -> dict[str, Any]:
    return {
        "postgresql": {"enabled": False},
        "externalDatabase": {"url": database},
        "redis": {"enabled": False},
        "externalRedis": {"url": REDIS},
        "worker": {"enabled": False},
        "operator": {"replicas": 1, "intervalSeconds": 1},
        "api": {"port": api_port, "cluster": {"jobNamespace": "default"}},
        "agent": {
            "enforceBandwidth": False,
            "extraArgs": [f"--topology-file={topology_file}", "--node-type=sandbox"],
        },
    }


def wait_for(what: str, check: Any, timeout_s: float, detail: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {detail()}")


def pod_logs(sandbox: Path) -> str:
    return "\n".join(
        f"== {p.parent.name}/{p.name}\n{p.read_text(errors='replace')[-1500:]}"
        for p in sorted(sandbox.glob("pods/*/*.log"))
    )


def get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def test_helm_install_trains_the_example(
    helm: Helm,
    control_plane: ControlPlane,
    node: ProcessKubelet,
    database: str,
    tmp_path: Path,
) -> None:
    namespace = f"helm-{secrets.token_hex(3)}"
    api_port = free_port(LOOPBACK)
    values_file = tmp_path / "values.yaml"
    values_file.write_text(
        yaml.safe_dump(values(database, api_port, topology(tmp_path / "t.yaml")))
    )
    sandbox = tmp_path / "sandbox"
    install = subprocess.run(
        [
            helm.binary,
            "install",
            "gpuflow",
            str(CHART),
            f"--kubeconfig={control_plane.kubeconfig}",
            f"--namespace={namespace}",
            "--create-namespace",
            f"--values={values_file}",
            "--wait",
            f"--timeout={INSTALL_TIMEOUT_S}s",
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S + 30,
        check=False,
    )
    try:
        assert install.returncode == 0, (
            f"helm install: {install.stderr}\n{kubectl(control_plane, 'get', 'pods', '-A')}"
            f"\n{pod_logs(sandbox)}"
        )
        pods = json.loads(kubectl(control_plane, "get", "pods", "-n", namespace, "-o", "json"))
        accounts = {
            p["metadata"]["labels"].get("app.kubernetes.io/component"): p["spec"][
                "serviceAccountName"
            ]
            for p in pods["items"]
            if p["status"].get("phase") == "Running"
        }
        # Each component runs under its own ServiceAccount.
        assert accounts == {
            "operator": "gpuflow-operator",
            "api": "gpuflow-api",
            "agent": "gpuflow-agent",
        }, accounts

        kubectl(control_plane, "apply", "-f", str(EXAMPLE))

        def phase() -> str:
            out = kubectl(control_plane, "get", "dljob", "mlp", "-o", "jsonpath={.status.phase}")
            return out if out in ("Succeeded", "Failed") else ""

        final = wait_for(
            "the example DLJob to finish",
            phase,
            TRAIN_TIMEOUT_S,
            lambda: kubectl(control_plane, "get", "dljob", "mlp", "-o", "yaml") + pod_logs(sandbox),
        )
        assert final == "Succeeded", pod_logs(sandbox)

        token = subprocess.run(
            [str(Path(sys.executable).parent / "gpuflow"), "admin", "create", "tester"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "GPUFLOW_DATABASE_URL": database},
        ).stdout.split()[-1]
        base = f"http://{LOOPBACK}:{api_port}"

        def listed() -> Any:
            jobs = get_json(f"{base}/api/v1/jobs", token)
            found = [j for j in jobs["data"] if "mlp" in json.dumps(j)]
            return found if found and "succeeded" in json.dumps(found).lower() else None

        found = wait_for("the chart's API to record the job", listed, 30, lambda: "")
        job_id = found[0]["id"]
        assert get_json(f"{base}/api/v1/jobs/{job_id}", token)["id"] == job_id
        with urllib.request.urlopen(f"{base}/", timeout=10) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
    finally:
        kubectl(control_plane, "delete", "dljob", "mlp", "--ignore-not-found", check=False)
        subprocess.run(
            [
                helm.binary,
                "uninstall",
                "gpuflow",
                f"--kubeconfig={control_plane.kubeconfig}",
                f"--namespace={namespace}",
                "--wait",
                "--timeout=60s",
            ],
            capture_output=True,
            timeout=90,
            check=False,
        )
        kubectl(control_plane, "delete", "namespace", namespace, "--wait=false", check=False)
