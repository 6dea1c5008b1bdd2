"""ProcessKubelet against the real control plane: real `python -c` processes, pods
the operator's way (nodeName set) and the controller manager's (a Deployment's)."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest

from gpuflow.sandbox.network import NodeNetwork, can_isolate
from operators.kube import KubeApi
from tests.sandbox.conftest import Start, gone, make_pod, status, wait_phase
from tests.waiting import wait_for


def test_env_delivered_running_then_succeeded(api: KubeApi, kubelet: Start) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tok"},
        "data": {"token": base64.b64encode(b"s3cret").decode()},
    }
    api.core.create_namespaced_secret("default", secret)
    code = (
        "import os, sys, time; e = os.environ; time.sleep(1);"
        "got = (e['A'], e['B'], e['TOKEN'], e['ME'], e['IP']);"
        "ok = got == ('1', '1-x', 's3cret', 'p1', '127.0.0.1');"
        "sys.exit(0 if ok else 3)"
    )
    env: list[dict[str, Any]] = [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "$(A)-x"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "token"}}},
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    kubelet()
    api.create_pod("default", make_pod("p1", code, env=env))
    st = wait_phase(api, "p1", "Running")
    assert st["startTime"] and st["podIP"] == "127.0.0.1"
    assert st["containerStatuses"][0]["state"]["running"]["startedAt"]
    st = wait_phase(api, "p1", "Succeeded")
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (0, "Completed")
    assert term["startedAt"] <= term["finishedAt"]


def test_failing_command_is_failed_with_its_exit_code(api: KubeApi, kubelet: Start) -> None:
    kubelet()
    api.create_pod("default", make_pod("p2", "import sys; sys.exit(7)"))
    st = wait_phase(api, "p2", "Failed")
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (7, "Error")


def test_missing_secret_waits_with_config_error(api: KubeApi, kubelet: Start) -> None:
    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]
    kubelet()
    api.create_pod("default", make_pod("p3", "pass", env=env))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cs = status(api, "p3").get("containerStatuses") or [{}]
        if "waiting" in cs[0].get("state", {}):
            break
        time.sleep(0.05)
    st = status(api, "p3")
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


def test_graceful_delete_sends_sigterm(api: KubeApi, kubelet: Start, tmp_path: Path) -> None:
    marker = tmp_path / "term"
    code = (
        "import signal, sys, time, pathlib;"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(marker)!r}).write_text('x'),"
        " sys.exit(75)));"
        "time.sleep(60)"
    )
    k = kubelet()
    api.create_pod("default", make_pod("p4", code, grace_s=20))
    wait_phase(api, "p4", "Running")
    time.sleep(0.5)  # the handler is installed
    pid = k.processes()["p4"]
    api.delete_pod("default", "p4", None)
    assert gone(api, "p4", 10) < 5  # the process ended on SIGTERM, long before the grace
    assert marker.read_text() == "x"
    assert not _alive(pid)


def test_sigkill_after_the_grace_period(api: KubeApi, kubelet: Start) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    k = kubelet()
    api.create_pod("default", make_pod("p5", code, grace_s=1))
    wait_phase(api, "p5", "Running")
    time.sleep(0.5)
    pid = k.processes()["p5"]
    api.delete_pod("default", "p5", None)
    took = gone(api, "p5", 10)
    assert 0.9 <= took < 5
    assert not _alive(pid)


def test_downward_annotations_follow_a_patch(api: KubeApi, kubelet: Start) -> None:
    code = (
        "import os, time, pathlib; p = pathlib.Path(os.environ['PODINFO'], 'annotations');"
        "t = time.monotonic();\n"
        "while 'gpuflow.dev/batch-size=\"128\"' not in p.read_text().splitlines():\n"
        "    assert time.monotonic() - t < 10; time.sleep(0.05)"
    )
    volume = {
        "name": "podinfo",
        "downwardAPI": {
            "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
        },
    }
    mount = {"name": "podinfo", "mountPath": "/etc/podinfo", "readOnly": True}
    env = [{"name": "PODINFO", "value": "/etc/podinfo"}]
    kubelet()
    pod = make_pod(
        "p6",
        code,
        env=env,
        volumes=[volume],
        mounts=[mount],
        annotations={"gpuflow.dev/batch-size": "64", "note": 'a "q"'},
    )
    api.create_pod("default", pod)
    wait_phase(api, "p6", "Running")
    api.patch_pod("default", "p6", {"metadata": {"annotations": {"gpuflow.dev/batch-size": "128"}}})
    wait_phase(api, "p6", "Succeeded")


def test_pvc_directory_survives_a_pod_restart(api: KubeApi, kubelet: Start) -> None:
    volume = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "job-ckpt"}}
    mount = {"name": "ckpt", "mountPath": "/ckpt"}
    env = [{"name": "GPUFLOW_CHECKPOINT_PATH", "value": "/ckpt/state.txt"}]
    write = (
        "import os, pathlib;"
        "pathlib.Path(os.environ['GPUFLOW_CHECKPOINT_PATH']).write_text('step=42')"
    )
    read = (
        "import os, sys, pathlib;"
        "text = pathlib.Path(os.environ['GPUFLOW_CHECKPOINT_PATH']).read_text();"
        "sys.exit(0 if text == 'step=42' else 4)"
    )
    kubelet()
    api.create_pod("default", make_pod("a-1-0", write, env=env, volumes=[volume], mounts=[mount]))
    wait_phase(api, "a-1-0", "Succeeded")
    api.delete_pod("default", "a-1-0", None)
    gone(api, "a-1-0", 5)
    api.create_pod("default", make_pod("a-2-0", read, env=env, volumes=[volume], mounts=[mount]))
    st = wait_phase(api, "a-2-0", "Succeeded")
    assert st["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_pod_acts_under_its_own_service_account(
    api: KubeApi, kubelet: Start, tmp_path: Path
) -> None:
    """A pod without nodeName is bound by kube-scheduler; its process gets the API
    server's address (KUBERNETES_SERVICE_HOST/PORT), its envFrom ConfigMap, and the
    token the kubelet obtained for the pod's ServiceAccount, which gpuflow's client
    finds through GPUFLOW_SERVICE_ACCOUNT_DIR: the API server then sees the
    ServiceAccount, not the node or the admin, and RBAC refuses what it may not do."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "sa-env"},
        "data": {"MODE": "in-cluster"},
    }
    api.core.create_namespaced_config_map("default", config_map)
    out = tmp_path / "who.txt"
    code = (
        "import os, pathlib, kubernetes\n"
        "from operators.kube.client import api_client\n"
        "client = api_client()\n"
        "auth = kubernetes.client.AuthenticationV1Api(client)\n"
        "review = {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'}\n"
        "me = auth.create_self_subject_review(review).status.user_info.username\n"
        "try:\n"
        "    kubernetes.client.CoreV1Api(client).list_namespaced_secret('default')\n"
        "    denied = 'no'\n"
        "except kubernetes.client.ApiException as exc:\n"
        "    denied = str(exc.status)\n"
        "client.close()\n"
        "e = os.environ\n"
        f"pathlib.Path({str(out)!r}).write_text("
        "' '.join([me, denied, e['MODE'], e['KUBERNETES_SERVICE_HOST']]))\n"
    )
    pod = make_pod("sa-1", code)
    del pod["spec"]["nodeName"]
    # kube-scheduler binds it; to node-0, whose kubelet runs here (other tests' nodes
    # may still be Ready on the session's shared control plane).
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-0"}
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "sa-env"}}]
    try:
        kubelet()
        api.create_pod("default", pod)
        st = wait_phase(api, "sa-1", "Succeeded", timeout_s=30)
        assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in st["conditions"])
        me, denied, mode, host = out.read_text().split()
        assert me == "system:serviceaccount:default:default"
        assert denied == "403"
        assert (mode, host) == ("in-cluster", "127.0.0.1")
    finally:
        api.core.delete_namespaced_config_map("sa-env", "default")


def test_deployment_pod_runs_and_is_collected(api: KubeApi, kubelet: Start) -> None:
    """The controller manager makes a Deployment's ReplicaSet and its pod (nodeName from
    the template; one without is bound by kube-scheduler, the test above); the kubelet
    runs it; deleting the Deployment
    lets the garbage collector delete the ReplicaSet and the pod, gracefully: the
    kubelet stops the process and the pod goes."""
    apps = kubernetes.client.AppsV1Api(api.client)
    labels = {"app": "web"}
    worker = {
        "name": "worker",
        "image": "ignored",
        "command": ["python", "-c", "import time; time.sleep(60)"],
    }
    template = {
        "metadata": {"labels": labels},
        "spec": {"nodeName": "node-0", "terminationGracePeriodSeconds": 5, "containers": [worker]},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }
    k = kubelet()
    apps.create_namespaced_deployment("default", deployment)

    def web_pod() -> Any:
        pods = api.core.list_namespaced_pod("default", label_selector="app=web").items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    pod = wait_for("the Deployment's pod Running", web_pod, 30)
    assert pod.metadata.owner_references[0].kind == "ReplicaSet"
    pid = wait_for("its process", lambda: k.processes().get(pod.metadata.name), 10)
    assert _alive(pid)
    apps.delete_namespaced_deployment("web", "default", propagation_policy="Background")
    gone(api, pod.metadata.name, 30)
    assert not _alive(pid)
    assert not apps.list_namespaced_replica_set("default", label_selector="app=web").items


ROOT_ONLY = pytest.mark.skipif(
    not can_isolate(), reason="network namespaces need root and iproute2"
)


@ROOT_ONLY
def test_two_nodes_talk_over_the_bridge(api: KubeApi, kubelet: Start) -> None:
    net = NodeNetwork.create(["node-0", "node-1"])
    try:
        a, b = net.address("node-0"), net.address("node-1")
        assert a != b and not a.startswith("127.")
        listen = (
            "import os, socket; s = socket.socket();"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
            "s.bind((os.environ['POD_IP'], 29500)); s.listen(); c, peer = s.accept();"
            "c.sendall(peer[0].encode()); c.close()"
        )
        connect = (
            "import os, socket, sys, time\n"
            "for _ in range(200):\n"
            "    try:\n"
            "        addr = (os.environ['MASTER_ADDR'], 29500)\n"
            "        c = socket.create_connection(addr, timeout=1); break\n"
            "    except OSError: time.sleep(0.05)\n"
            "sys.exit(0 if c.recv(64).decode() == os.environ['POD_IP'] else 5)"
        )
        ip_env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        master = [{"name": "MASTER_ADDR", "value": "srv.job.default.svc"}]
        kubelet("node-0", net)
        kubelet("node-1", net)
        api.create_pod("default", make_pod("srv", listen, node="node-0", env=ip_env))
        api.create_pod("default", make_pod("cli", connect, node="node-1", env=[*ip_env, *master]))
        srv, cli = wait_phase(api, "srv", "Succeeded"), wait_phase(api, "cli", "Succeeded")
        assert (srv["hostIP"], cli["hostIP"]) == (a, b)  # each pod its own address
        assert len({a, b, srv["podIP"], cli["podIP"]}) == 4
    finally:
        net.teardown()
    shown = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert net.tag not in shown
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert net.tag not in links


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"
