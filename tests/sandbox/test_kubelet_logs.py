"""The emulated kubelet's logs through the real API server: `kubectl logs` (tail,
follow, limit, timestamps, since, previous, a missing pod), proxied to the kubelet's
HTTPS server at the port its Node's status names, on loopback and, as root, at the
node's own address in its network namespace; the server alone, and how a container's
output is kept with each line's time."""

from __future__ import annotations

import http.client
import re
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuflow.sandbox.controlplane import ControlPlane
from gpuflow.sandbox.kubelet.output import ContainerOutput, LineTimes
from gpuflow.sandbox.kubelet.pki import CLIENT_NAME, write_kubelet_serving
from gpuflow.sandbox.kubelet.server import ContainerLog, KubeletServer, NoLog, tail_bytes
from gpuflow.sandbox.network import NodeNetwork, can_isolate
from operators.kube import KubeApi
from tests.sandbox.conftest import Start, make_pod, wait_phase

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
NEEDS_KUBECTL = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
# Prints five numbered lines, one every 0.3 s: a follower sees them come.
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z"  # RFC 3339 with nanoseconds
COUNT = "import time\nfor i in range(5):\n    print(f'line {i}', flush=True); time.sleep(0.3)"


def kubectl(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [KUBECTL, "--kubeconfig", str(plane.kubeconfig), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def logs(plane: ControlPlane, *args: str) -> str:
    done = kubectl(plane, "logs", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("text", "lines", "tail"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),  # no newline at the end yet
        (b"a\nb\n", 5, b"a\nb\n"),
        (b"a\nb\n", 0, b""),
        (b"a\nb\n", None, b"a\nb\n"),
        (b"", 3, b""),
        (b"x" * 100_000 + b"\nlast\n", 1, b"last\n"),  # past one block
    ],
)
def test_tail_bytes(tmp_path: Path, text: bytes, lines: int | None, tail: bytes) -> None:
    path = tmp_path / "worker.log"
    path.write_bytes(text)
    assert tail_bytes(path, lines) == (tail, len(text))


@pytest.fixture
def server(control_plane: ControlPlane, tmp_path: Path) -> Iterator[KubeletServer]:
    """A kubelet server on loopback serving default/p's worker log, as a process wrote
    it through the kubelet's pipe (container_output.py)."""
    log = _written(tmp_path, "print('one'); print('two'); print('three')")

    def lookup(namespace: str, pod: str, container: str) -> ContainerLog:
        if (namespace, pod, container) != ("default", "p", "worker"):
            raise NoLog(404, f'pod "{pod}" in namespace "{namespace}" not found')
        return ContainerLog(log, lambda: False)

    tls = write_kubelet_serving(control_plane.ca_file.parent, "node-2", "127.0.0.1")
    kubelet = KubeletServer("127.0.0.1", tls, lookup)
    kubelet.start()
    yield kubelet
    kubelet.stop()


def _written(tmp_path: Path, code: str) -> Path:
    """The log of `python -c code` kept as the kubelet keeps a container's."""
    output = ContainerOutput(tmp_path / "worker.log")
    with subprocess.Popen([sys.executable, "-c", code], stdout=output.fd) as proc:
        output.started()
    assert proc.returncode == 0
    output.wait()
    return output.log


def test_a_containers_output_is_kept_with_each_lines_time(tmp_path: Path) -> None:
    before = time.time_ns()
    code = "import sys, time; w = sys.stdout.write; w('a\\nbb\\n'); sys.stdout.flush();"
    code += "time.sleep(0.2); w('c'); sys.stdout.flush(); time.sleep(0.1); w('c\\nd')"
    log = _written(tmp_path, code)
    assert log.read_bytes() == b"a\nbb\ncc\nd"  # the process's bytes, unchanged
    times = LineTimes(log)
    assert times.offsets == [0, 2, 5, 8]  # each line's first byte
    assert before < times.times_ns[0] == times.times_ns[1] < times.times_ns[2]
    assert times.times_ns[2] - times.times_ns[0] >= 200_000_000  # 'c' came 0.2 s later
    stamped = times.stamped(b"bb\ncc\nd", 2).decode()
    assert re.fullmatch(rf"{STAMP} bb\n{STAMP} cc\n{STAMP} d", stamped), stamped
    assert times.stamped(b"c\nd", 6).decode().startswith("c\n")  # mid-line: no time
    assert times.first_since(times.times_ns[2]) == 5
    assert times.first_since(time.time_ns()) is None


def _get(server: KubeletServer, path: str, client_cert: bool = True) -> tuple[int, str]:
    pki = server.tls.client_ca_file.parent
    context = ssl.create_default_context(cafile=str(server.tls.client_ca_file))
    if client_cert:  # the API server's (--kubelet-client-certificate)
        context.load_cert_chain(pki / f"{CLIENT_NAME}.crt", pki / f"{CLIENT_NAME}.key")
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        ("/containerLogs/default/p/worker", 200, "one\ntwo\nthree\n"),
        ("/containerLogs/default/p/worker?tailLines=1&follow=true", 200, "three\n"),
        ("/containerLogs/default/p/worker?tailLines=x", 400, "tailLines: expected a whole"),
        ("/containerLogs/default/p/worker?limitBytes=0", 400, "limitBytes: expected a whole"),
        ("/containerLogs/default/p/worker?sinceSeconds=3600", 200, "one\ntwo\nthree\n"),
        ("/containerLogs/default/p/worker?sinceTime=2999-01-01T00:00:00Z", 200, ""),
        ("/containerLogs/default/p/worker?sinceTime=yesterday", 400, "sinceTime: expected an"),
        (
            "/containerLogs/default/p/worker?sinceSeconds=1&sinceTime=2999-01-01T00:00:00Z",
            400,
            "at most one of sinceTime or sinceSeconds",
        ),
        ("/containerLogs/default/q/worker", 404, 'pod "q" in namespace "default" not found'),
        ("/exec/default/p/worker", 404, "no route /exec/default/p/worker"),
    ],
)
def test_the_kubelet_server_answers_as_a_kubelet(
    server: KubeletServer, path: str, status: int, body: str
) -> None:
    got_status, got_body = _get(server, path)
    assert got_status == status
    assert got_body.startswith(body) and (status != 200 or got_body == body), got_body


def test_the_kubelet_server_stamps_each_line_with_its_time(server: KubeletServer) -> None:
    status, body = _get(server, "/containerLogs/default/p/worker?timestamps=true&tailLines=2")
    assert status == 200
    assert re.fullmatch(rf"{STAMP} two\n{STAMP} three\n", body), body


def test_a_client_without_the_clusters_certificate_is_refused(server: KubeletServer) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(server, "/containerLogs/default/p/worker", client_cert=False)


@NEEDS_KUBECTL
def test_kubectl_logs_through_the_api_server(
    api: KubeApi, kubelet: Start, control_plane: ControlPlane
) -> None:
    kubelet(serve_logs=True)
    node = api.get_node("node-0")
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    api.create_pod("default", make_pod("count", COUNT))
    wait_phase(api, "count", "Running")
    # Followed from the start: the lines as they come, until the process exits.
    assert logs(control_plane, "-f", "count") == "".join(f"line {i}\n" for i in range(5))
    wait_phase(api, "count", "Succeeded")
    assert logs(control_plane, "count") == "".join(f"line {i}\n" for i in range(5))
    assert logs(control_plane, "count", "--tail=2") == "line 3\nline 4\n"
    assert logs(control_plane, "count", "-c", "worker", "--limit-bytes=8") == "line 0\nl"
    previous = kubectl(control_plane, "logs", "count", "--previous")
    assert previous.returncode != 0
    assert 'previous terminated container "worker" in pod "count" not found' in previous.stderr
    stamped = logs(control_plane, "count", "--timestamps", "--tail=2")
    assert re.fullmatch(rf"{STAMP} line 3\n{STAMP} line 4\n", stamped), stamped
    assert logs(control_plane, "count", "--since=1h") == "".join(f"line {i}\n" for i in range(5))
    missing = kubectl(control_plane, "logs", "nope")
    assert missing.returncode != 0 and 'pods "nope" not found' in missing.stderr


@NEEDS_KUBECTL
@pytest.mark.skipif(not can_isolate(), reason="network namespaces need root and iproute2")
def test_kubectl_logs_from_a_node_in_its_network_namespace(
    api: KubeApi, kubelet: Start, control_plane: ControlPlane
) -> None:
    net = NodeNetwork.create(["node-1"])
    try:
        kubelet("node-1", net, serve_logs=True)
        node = api.get_node("node-1")
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == net.address("node-1") != "127.0.0.1"
        api.create_pod("default", make_pod("hi", "print('hello from node-1')", node="node-1"))
        wait_phase(api, "hi", "Succeeded")
        assert logs(control_plane, "hi") == "hello from node-1\n"
    finally:
        net.teardown()
