"""`helm install` of the chart into a real control plane, the example DLJob trained to
Succeeded by the chart's own operator, agent and API.

The control plane is the tests' shared one (tests/controlplane/fixtures.py `control_plane`:
etcd, kube-apiserver with RBAC and service-account tokens, kube-controller-manager,
kube-scheduler); one process kubelet (gpuflow/sandbox/kubelet/__init__.py) plays node-0 with
its own credentials, labelled as GPU Feature Discovery labels a GPU node, with the
device plugin's 4 `nvidia.com/gpu`. Helm installs the chart (CRDs, RBAC, the
migration hook Job, the operator and API Deployments, the agent DaemonSet) into a
namespace of its own, against this machine's PostgreSQL (a database created for the
test) and Redis; the controller manager makes the pods, the scheduler binds them, the
kubelet runs them as processes, each with its own ServiceAccount's token, so every
request they make is judged by the chart's RBAC. Then `kubectl apply -f
examples/train/dljob.yaml` must train to Succeeded, and the chart's API must list the
job (it follows DLJobs through its ServiceAccount), receive the worker's metric
reports and serve the dashboard. With
`create` taken off the pods rule of the operator's ClusterRole, a second DLJob must
wait with reason Forbidden naming the verb and resource, the operator must log the
refusal, and the job must start once the verb is back. One release serves both tests
(an install takes ~25 s here).
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
from dataclasses import dataclass
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
OPERATOR = "gpuflow-operator"  # the operator's ServiceAccount and ClusterRole


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


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A database of its own for the chart's API (its migration Job creates the
    tables), dropped after the tests."""
    name = f"gpuflow_helm_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-sandbox")


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane, sandbox: Path) -> Iterator[ProcessKubelet]:
    """node-0's kubelet (on loopback: the pods reach this machine's PostgreSQL and
    Redis at 127.0.0.1), its Node labelled as a GPU node."""
    network = NodeNetwork("helm", False, addresses={NODE: LOOPBACK})
    node_api = KubeApi(api_client(str(control_plane.node_kubeconfig(NODE))))
    admin = KubeApi(api_client(str(control_plane.kubeconfig)))
    kubelet = ProcessKubelet(
        node_api,
        NODE,
        network,
        sandbox,
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


def pod_logs(sandbox: Path, component: str = "") -> str:
    return "\n".join(
        f"== {p.parent.name}/{p.name}\n{p.read_text(errors='replace')[-1500:]}"
        for p in sorted(sandbox.glob(f"pods/*{component}*/*.log"))
    )


def get_json(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


@dataclass(frozen=True)
class Release:
    namespace: str
    api_url: str  # the API pod's own address: the sandbox has no Service proxy
    database: str
    sandbox: Path


@pytest.fixture(scope="module")
def release(
    helm: Helm,
    control_plane: ControlPlane,
    node: ProcessKubelet,
    database: str,
    sandbox: Path,
) -> Iterator[Release]:
    """`helm install gpuflow helm/gpuflow --wait` into a namespace of its own."""
    namespace = f"helm-{secrets.token_hex(3)}"
    api_port = free_port(LOOPBACK)
    values_file = sandbox / "values.yaml"
    chosen = values(database, api_port, topology(sandbox / "topology.yaml"))
    values_file.write_text(yaml.safe_dump(chosen))
    helm_args = [f"--kubeconfig={control_plane.kubeconfig}", f"--namespace={namespace}"]
    install = subprocess.run(
        [
            helm.binary,
            "install",
            "gpuflow",
            str(CHART),
            *helm_args,
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
        # The API server's field validation warns of a field no schema knows (helm
        # prints each warning): every template and the CRD's schema must be exact.
        assert "unknown field" not in install.stderr, install.stderr
        yield Release(namespace, f"http://{LOOPBACK}:{api_port}", database, sandbox)
    finally:
        subprocess.run(
            [helm.binary, "uninstall", "gpuflow", *helm_args, "--wait", "--timeout=60s"],
            capture_output=True,
            timeout=90,
            check=False,
        )
        kubectl(control_plane, "delete", "namespace", namespace, "--wait=false", check=False)


def dljob_status(cp: ControlPlane, name: str) -> dict[str, Any]:
    out = kubectl(cp, "get", "dljob", name, "-o", "json", check=False)
    return dict(json.loads(out).get("status") or {}) if out else {}


def test_helm_install_trains_the_example(control_plane: ControlPlane, release: Release) -> None:
    pods = json.loads(kubectl(control_plane, "get", "pods", "-n", release.namespace, "-o", "json"))
    accounts = {
        p["metadata"]["labels"].get("app.kubernetes.io/component"): p["spec"]["serviceAccountName"]
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
    try:

        def finished() -> str:
            phase = str(dljob_status(control_plane, "mlp").get("phase"))
            return phase if phase in ("Succeeded", "Failed") else ""

        final = wait_for(
            "the example DLJob to finish",
            finished,
            TRAIN_TIMEOUT_S,
            lambda: f"{dljob_status(control_plane, 'mlp')}\n{pod_logs(release.sandbox)}",
        )
        assert final == "Succeeded", pod_logs(release.sandbox)

        token = subprocess.run(
            [str(Path(sys.executable).parent / "gpuflow"), "admin", "create", "tester"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "GPUFLOW_DATABASE_URL": release.database},
        ).stdout.split()[-1]

        def listed() -> Any:
            jobs = get_json(f"{release.api_url}/api/v1/jobs", token)
            found = [j for j in jobs["data"] if "mlp" in json.dumps(j)]
            return found if found and "succeeded" in json.dumps(found).lower() else None

        found = wait_for("the chart's API to record the job", listed, 30, lambda: "")
        job_id = found[0]["id"]
        assert get_json(f"{release.api_url}/api/v1/jobs/{job_id}", token)["id"] == job_id
        # The worker reported its training to the chart's API through the operator's
        # --api-url (a Service's name, routed to the API pod by the kubelet), and the
        # API summarised it into the DLJob's status.train with its own ServiceAccount.
        metrics = get_json(f"{release.api_url}/api/v1/jobs/{job_id}/metrics", token)
        assert metrics["count"] > 0, metrics
        train = wait_for(
            "status.train",
            lambda: dljob_status(control_plane, "mlp").get("train"),
            30,
            lambda: dljob_status(control_plane, "mlp"),
        )
        assert train["step"] > 0, train
        with urllib.request.urlopen(f"{release.api_url}/", timeout=10) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
    finally:
        kubectl(control_plane, "delete", "dljob", "mlp", "--ignore-not-found", check=False)


def test_a_verb_taken_from_the_operator_role_is_named(
    control_plane: ControlPlane, release: Release
) -> None:
    role = json.loads(kubectl(control_plane, "get", "clusterrole", OPERATOR, "-o", "json"))
    restricted = json.loads(json.dumps(role))
    pods_rule = next(r for r in restricted["rules"] if r.get("resources") == ["pods"])
    assert "create" in pods_rule["verbs"]
    pods_rule["verbs"].remove("create")
    role_file = release.sandbox / "role.json"
    role_file.write_text(json.dumps(restricted))
    kubectl(control_plane, "replace", "-f", str(role_file))
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = "mlp-rbac"
    job["spec"]["template"]["spec"]["containers"][0]["command"][-4] = "--steps=50"
    job_file = release.sandbox / "mlp-rbac.yaml"
    job_file.write_text(yaml.safe_dump(job))
    kubectl(control_plane, "apply", "-f", str(job_file))
    try:

        def forbidden() -> dict[str, Any] | None:
            status = dljob_status(control_plane, "mlp-rbac")
            return status if status.get("reason") == "Forbidden" else None

        status = wait_for(
            "the DLJob to wait with reason Forbidden",
            forbidden,
            30,
            lambda: f"{dljob_status(control_plane, 'mlp-rbac')}\n{pod_logs(release.sandbox)}",
        )
        assert status["phase"] == "Queued"
        assert status["attempt"] == 0  # a start that made no pod is not counted
        queued = next(c for c in status["conditions"] if c["type"] == "Queued")
        assert queued["reason"] == "Forbidden"
        # The API server's own words, through the operator: who, which verb, which resource.
        assert 'cannot create resource "pods"' in queued["message"], queued
        assert f"system:serviceaccount:{release.namespace}:{OPERATOR}" in queued["message"]
        events = wait_for(
            "the Warning event",
            lambda: json.loads(
                kubectl(
                    control_plane,
                    "get",
                    "events",
                    "--field-selector=involvedObject.name=mlp-rbac,reason=Forbidden",
                    "-o",
                    "json",
                )
            )["items"],
            10,
            lambda: kubectl(control_plane, "get", "events"),
        )
        assert events[0]["type"] == "Warning" and "cannot create" in events[0]["message"]
        log = pod_logs(release.sandbox, "gpuflow-operator")
        assert "api error verb=create resource=pods code=403" in log, log

        # The verb back: the next round starts the job.
        original = {k: v for k, v in role.items() if k != "metadata"}
        kept = ("name", "labels", "annotations")
        original["metadata"] = {k: v for k, v in role["metadata"].items() if k in kept}
        role_file.write_text(json.dumps(original))
        kubectl(control_plane, "replace", "-f", str(role_file))
        wait_for(
            "the DLJob to start once the role allows",
            lambda: (
                dljob_status(control_plane, "mlp-rbac").get("phase") in ("Running", "Succeeded")
            ),
            30,
            lambda: dljob_status(control_plane, "mlp-rbac"),
        )
    finally:
        kubectl(control_plane, "delete", "dljob", "mlp-rbac", "--ignore-not-found", check=False)
