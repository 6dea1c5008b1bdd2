"""The two API servers bench/operator.py measures the operator against, behind one
interface (`BenchServer`): what each makes the nodes with, how it counts the jobs
placed, and how it counts the requests the operator sends.

- `RealServer`: the real control plane (gpuflow/sandbox/controlplane.py: etcd,
  kube-apiserver, kube-controller-manager, kube-scheduler), started in a temporary
  folder, or an already running one given by an admin's kubeconfig (the smoke test's
  session control plane). Nodes register as a kubelet registers them (Ready, the GPUs
  their device plugin publishes: heartbeat.py `NodeHeartbeat.register`) and stay
  alive through a `LeaseRenewer` (16 threads) renewing every node's Lease at the
  kubelet's 10-s period, from before the first node is made. The operator runs as
  its own ServiceAccount (bound to cluster-admin), which a FlowSchema of its own puts
  at priority level workload-low, where the bootstrap `service-accounts` schema would
  put it: kube-apiserver's /metrics then count its requests apart
  (`apiserver_flowcontrol_dispatched_requests_total` of that schema), beside every
  request by verb and resource (`apiserver_request_total`) and the open watches
  (`apiserver_longrunning_requests`), with the requests' latency and the store's
  (`etcd_request_duration_seconds`). Placements are counted from a watch on the
  operator's pods.
- `TestServer`: gpuflow/sandbox/kube's KubeServer in this process, as before: nodes
  created with their GPU resources (it runs no node lifecycle controller),
  placements read from its store, requests from its request log.
"""

from __future__ import annotations

import collections
import json
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import kubernetes  # type: ignore[import-untyped]
import urllib3

from gpuflow.sandbox.controlplane import ControlPlane, write_kubeconfig
from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from gpuflow.sandbox.kubelet.heartbeat import LeaseRenewer, NodeHeartbeat
from gpuflow.sandbox.network import LOOPBACK
from operators import crd
from operators.kube import ALREADY_EXISTS, NOT_FOUND, ApiException, KubeApi, Obj, api_client
from tests.operators.builders import make_node_body
from tests.operators.real_cluster import ensure_crds

SETUP_THREADS = 8
# The operator's ServiceAccount, its ClusterRoleBinding and its FlowSchema on the real
# server (namespace default), removed again when the bench ends.
OPERATOR_IDENTITY = "gpuflow-operator-bench"
# Before the bootstrap schemas that would take a ServiceAccount (service-accounts: 9000).
FLOW_SCHEMA_PRECEDENCE = 500
TOKEN_S = 3600  # the operator token's lifetime: longer than any run
IDENTITY_WAIT_S = 30.0  # for the FlowSchema to classify the operator's first request
POD_WATCH_S = 5  # the placement watch's timeoutSeconds: it is reopened from its version
METRIC_LABELS = re.compile(r'(\w+)="([^"]*)"')


class BenchServer(Protocol):
    """What bench/operator.py needs of an API server."""

    name: str
    operator_kubeconfig: Path
    api: KubeApi

    def create_nodes(self, bodies: list[Obj]) -> None: ...

    def placed(self, wait_s: float) -> int:
        """Jobs with a bound worker pod so far, after waiting up to `wait_s` for more."""
        ...

    def requests(self) -> Counter[str]:
        """Requests served so far by "VERB resource[/subresource]"."""
        ...

    def request_seconds(self) -> dict[str, float]:
        """Seconds spent serving requests so far, by "VERB resource" (real only)."""
        ...

    def store_requests(self) -> dict[str, tuple[float, float]]:
        """The API server's requests to its store so far: (count, seconds) by
        operation (real only: kube-apiserver's etcd_request_duration_seconds)."""
        ...

    def watches(self) -> int:
        """Real: watches open now; test: watch requests served so far."""
        ...

    def operator_requests(self) -> int:
        """The operator's requests served so far."""
        ...

    def own_requests(self) -> int:
        """Requests the bench itself sent since it started (its heartbeats, its watch)."""
        ...

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of the server's processes that the bench started, by name."""
        ...

    def heartbeats(self) -> str:
        """How the nodes' heartbeats kept up (real), or "" (test: none needed)."""
        ...


class TestServer:
    """gpuflow/sandbox/kube's KubeServer in this process."""

    name = "test (gpuflow/sandbox/kube, in the bench's process)"

    def __init__(self, server: KubeServer) -> None:
        self.server = server
        # Every request from here on (the server keeps the last 10,000 by default).
        server.requests = collections.deque()
        self.operator_kubeconfig = server.kubeconfig
        self.client = server.api_client()
        self.api = KubeApi(self.client)
        ensure_crds(self.client)
        rt = server.registry.lookup("", "v1", "pods")
        assert rt is not None
        self._key = rt.key
        self._rv = server.store.resource_version
        self._jobs: set[str] = set()

    def create_nodes(self, bodies: list[Obj]) -> None:
        with ThreadPoolExecutor(SETUP_THREADS) as pool:
            list(pool.map(self.api.create_node, bodies))
        self._rv = self.server.store.resource_version

    def placed(self, wait_s: float) -> int:
        """Read from the store's watch history in-process: no HTTP list competing with
        the operator for the server."""
        store = self.server.store
        events, self._rv = store.events_after(self._key, self._rv, wait_s, lambda: False)
        for event in events:
            _count_placed(event.obj, self._jobs)
        return len(self._jobs)

    def requests(self) -> Counter[str]:
        return Counter(_test_request_key(r.method, r.path) for r in list(self.server.requests))

    def request_seconds(self) -> dict[str, float]:
        return {}  # its request log keeps no durations

    def store_requests(self) -> dict[str, tuple[float, float]]:
        return {}  # its store is a dict in this process

    def watches(self) -> int:
        return sum(1 for r in list(self.server.requests) if "watch=" in r.path)

    def operator_requests(self) -> int:
        """Every request: the bench reads the store in-process."""
        return len(self.server.requests)

    def own_requests(self) -> int:
        return 0

    def cpu_s(self) -> dict[str, float]:
        """None of its own: it shares the bench's process (whose CPU the bench reads)."""
        return {}

    def heartbeats(self) -> str:
        return ""


def _test_request_key(method: str, path: str) -> str:
    """ "GET pods", "WATCH dljobs", "PATCH dljobs/status" for a request's path."""
    url = urlsplit(path)
    parts = [p for p in url.path.split("/") if p]
    # /api/v1/... or /apis/GROUP/VERSION/...; then namespaces/NS, then resource[/name[/sub]]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]]) if rest else url.path
    verb = "WATCH" if "watch=" in url.query else method
    if verb == "GET" and len(rest) == 1:
        verb = "LIST"
    return f"{verb} {resource}"


class RealServer:
    """The real control plane, with its nodes' Leases renewed and the operator's pods
    watched; close() stops what it started."""

    def __init__(self, kubeconfig: Path | None) -> None:
        self._stack = ExitStack()
        try:
            folder = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
            self._pids: dict[str, int] = {}
            if kubeconfig is None:
                plane = self._stack.enter_context(ControlPlane(folder / "controlplane"))
                kubeconfig = plane.kubeconfig
                self._pids = plane.pids
                self.name = f"real (Kubernetes {plane.version}, {plane.store})"
            else:
                self.name = f"real (the cluster of {kubeconfig})"
            self.client = api_client(str(kubeconfig))
            self._stack.callback(self.client.rest_client.pool_manager.clear)
            self.api = KubeApi(self.client)
            ensure_crds(self.client)
            self.operator_kubeconfig = self._operator_identity(folder / "operator.kubeconfig")
            self.renewer = LeaseRenewer(self.api)
            self._stack.callback(self.renewer.stop)
            self._pods = _PodWatch(self.client)
            self._stack.callback(self._pods.stop)
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def create_nodes(self, bodies: list[Obj]) -> None:
        def register(body: Obj) -> None:
            devices = body["status"]["capacity"]
            name = body["metadata"]["name"]
            node = NodeHeartbeat(self.api, name, LOOPBACK, devices=devices).register(
                body["metadata"]
            )
            self.renewer.add(node)

        self.renewer.start()  # renewing the Leases as they are made
        with ThreadPoolExecutor(SETUP_THREADS) as pool:
            list(pool.map(register, bodies))

    def placed(self, wait_s: float) -> int:
        return self._pods.placed(wait_s)

    def requests(self) -> Counter[str]:
        totals = self._by_request("apiserver_request_total")
        return Counter({key: int(n) for key, n in totals.items()})

    def request_seconds(self) -> dict[str, float]:
        return self._by_request("apiserver_request_duration_seconds_sum")

    def store_requests(self) -> dict[str, tuple[float, float]]:
        counts: dict[str, float] = collections.defaultdict(float)
        seconds: dict[str, float] = collections.defaultdict(float)
        for labels, value in self._metric("etcd_request_duration_seconds_count"):
            counts[labels["operation"]] += value
        for labels, value in self._metric("etcd_request_duration_seconds_sum"):
            seconds[labels["operation"]] += value
        return {op: (n, seconds[op]) for op, n in counts.items()}

    def _by_request(self, metric: str) -> dict[str, float]:
        """`metric`'s samples summed by "VERB resource[/subresource]"."""
        sums: dict[str, float] = collections.defaultdict(float)
        for labels, value in self._metric(metric):
            sub = labels.get("subresource")
            sums[f"{labels['verb']} {labels['resource']}{'/' + sub if sub else ''}"] += value
        return dict(sums)

    def watches(self) -> int:
        samples = self._metric("apiserver_longrunning_requests")
        return int(sum(value for labels, value in samples if labels.get("verb") == "WATCH"))

    def operator_requests(self) -> int:
        samples = self._metric("apiserver_flowcontrol_dispatched_requests_total")
        return int(
            sum(n for labels, n in samples if labels.get("flow_schema") == OPERATOR_IDENTITY)
        )

    def own_requests(self) -> int:
        return self.renewer.renewals + self._pods.requests

    def cpu_s(self) -> dict[str, float]:
        return {name: process_cpu_s(pid) for name, pid in self._pids.items()}

    def heartbeats(self) -> str:
        r = self.renewer
        return (
            f"node Leases: {r.renewals} renewals, {r.failures} failed, the longest a node"
            f" went unrenewed {r.longest_gap_s:.1f} s (the kubelet renews every"
            f" {r.config.renew_s:.0f} s; a Lease lasts {r.config.lease_duration_s} s)"
        )

    def _operator_identity(self, path: Path) -> Path:
        """The operator's ServiceAccount, bound to cluster-admin, and its FlowSchema
        (deleted at close()); a kubeconfig with a token of the ServiceAccount, returned
        once the FlowSchema classifies a request made with it."""
        name, namespace = OPERATOR_IDENTITY, "default"
        core = self.api.core
        rbac = kubernetes.client.RbacAuthorizationV1Api(self.client)
        flow = kubernetes.client.FlowcontrolApiserverV1Api(self.client)
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        _create(
            lambda: core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
        )
        self._stack.callback(
            _delete, lambda: core.delete_namespaced_service_account(name, namespace)
        )
        binding = {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [subject],
        }
        _create(lambda: rbac.create_cluster_role_binding(binding))
        self._stack.callback(_delete, lambda: rbac.delete_cluster_role_binding(name))
        schema = {
            "metadata": {"name": name},
            "spec": {
                "matchingPrecedence": FLOW_SCHEMA_PRECEDENCE,
                "priorityLevelConfiguration": {"name": "workload-low"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {
                                "kind": "ServiceAccount",
                                "serviceAccount": {"name": name, "namespace": namespace},
                            }
                        ],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "clusterScope": True,
                                "namespaces": ["*"],
                            }
                        ],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        }
        _create(lambda: flow.create_flow_schema(schema))
        self._stack.callback(_delete, lambda: flow.delete_flow_schema(name))
        request = {"spec": {"expirationSeconds": TOKEN_S}}
        token = core.create_namespaced_service_account_token(name, namespace, request).status.token
        config = self.client.configuration
        write_kubeconfig(
            path,
            config.host,
            Path(config.ssl_ca_cert),
            f"system:serviceaccount:{namespace}:{name}",
            token,
        )
        operator = api_client(str(path))
        try:
            deadline = time.monotonic() + IDENTITY_WAIT_S
            while True:
                _get(operator, "/version")
                if self.operator_requests():
                    return path
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"FlowSchema {name} classified none of the operator's requests"
                    )
                time.sleep(0.2)
        finally:
            operator.rest_client.pool_manager.clear()

    def _metric(self, name: str) -> list[tuple[dict[str, str], float]]:
        """(labels, value) of each sample of `name` on kube-apiserver's /metrics."""
        text = _get(self.client, "/metrics").decode()
        out = []
        for line in text.splitlines():
            if line.startswith(name + "{"):
                labels, value = line[len(name) :].rsplit(" ", 1)
                out.append((dict(METRIC_LABELS.findall(labels)), float(value)))
        return out


class _PodWatch:
    """The jobs whose worker pods are bound, from a watch on the operator's pods (a
    thread, reopened every POD_WATCH_S from the last version it saw)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests = 0
        self._jobs: set[str] = set()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def placed(self, wait_s: float) -> int:
        with self._changed:
            self._changed.wait(wait_s)
            return len(self._jobs)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        selector = f"{crd.LABEL_MANAGED}={crd.MANAGER}"
        version = ""
        while not self._stop.is_set():
            path = (
                f"/api/v1/pods?watch=1&labelSelector={selector}"
                f"&timeoutSeconds={POD_WATCH_S}&resourceVersion={version}"
            )
            self.requests += 1
            for event in _stream(self.client, path):
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] in ("ADDED", "MODIFIED"):
                    with self._changed:
                        _count_placed(obj, self._jobs)
                        self._changed.notify_all()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _create(fn: Callable[[], Any]) -> None:
    """`fn()`, an object left by an earlier run (AlreadyExists) being fine."""
    try:
        fn()
    except ApiException as exc:
        if exc.status != ALREADY_EXISTS:
            raise


def _delete(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except ApiException as exc:
        if exc.status != NOT_FOUND:
            raise


def _count_placed(pod: Obj, jobs: set[str]) -> None:
    labels = pod["metadata"].get("labels") or {}
    if labels.get(crd.LABEL_MANAGED) == crd.MANAGER and (pod.get("spec") or {}).get("nodeName"):
        jobs.add(labels[crd.LABEL_JOB])


def _request(client: Any, path: str, stream: bool) -> urllib3.BaseHTTPResponse:
    settings = client.configuration.auth_settings()
    headers = {s["key"]: s["value"] for s in settings.values() if s.get("in") == "header"}
    resp: urllib3.BaseHTTPResponse = client.rest_client.pool_manager.request(
        "GET",
        client.configuration.host + path,
        headers=headers,
        preload_content=not stream,
        timeout=urllib3.Timeout(connect=10.0, read=None if stream else 30.0),
    )
    if resp.status != 200:
        body = resp.data
        resp.release_conn()
        raise RuntimeError(f"GET {path}: HTTP {resp.status}: {body[:200]!r}")
    return resp


def _get(client: Any, path: str) -> bytes:
    return _request(client, path, stream=False).data


def _stream(client: Any, path: str) -> Iterator[Obj]:
    """The events of a watch, until the server ends it."""
    resp = _request(client, path, stream=True)
    try:
        buffer = b""
        for chunk in resp.stream(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
    finally:
        resp.release_conn()


@contextmanager
def bench_server(kind: str, kubeconfig: Path | None, history: int) -> Iterator[BenchServer]:
    """The server of `kind` ("real" or "test"), closed on exit."""
    if kind == "real":
        real = RealServer(kubeconfig)
        try:
            yield real
        finally:
            real.close()
        return
    with KubeServer(options=ServerOptions(history_limit=history)) as server:
        yield TestServer(server)


def node_bodies(count: int) -> list[Obj]:
    """DGX-1 nodes node-0000... in racks of 16."""
    return [make_node_body(f"node-{i:04d}", rack=f"r{i // 16}") for i in range(count)]
