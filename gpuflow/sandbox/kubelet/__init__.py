"""An emulated node's kubelet that runs each bound pod's worker as a local process.

`gpuflow sandbox` (cluster.py) starts one `ProcessKubelet` per node against the real
kube-apiserver (controlplane.py), each with its node's own credentials; tests/sandbox
start them alone against one. (The operator tests' `tests/operators/kubelet.py` is
another thing: a double that plays workloads without processes.)

start() registers the node and keeps up its status and Lease (heartbeat.py), then it
watches the pods whose spec.nodeName is its node: those the operator binds and those
kube-scheduler binds (the controller manager's: a Deployment's, a DaemonSet's, a
Job's). A Pending pod's worker container
(named `worker`, else the first; other and init containers are not run), once
admitted (admission.py: its extended resources fit the node's allocatable, else it
goes Failed with reason OutOf<resource>), starts as a
process group: its command and args (podenv.py: env and envFrom, `$(VAR)`, the
venv's programs, the chart's image's entrypoint), in the repository root or
`workdir`, as root inside a network namespace of the pod's own with
an address of its own on the node's bridge (network.py `attach_pod`; freed
when the pod is deleted for good), stdout and stderr to `<pod dir>/<container>.log`
with each line's time beside it (container_output.py);
volumes are host directories (volumes.py). As a real kubelet it gives the process
KUBERNETES_SERVICE_HOST and _PORT (the API server as pods reach it: `apiserver_host`,
the sandbox bridge's address when pods have network namespaces) and writes the
ServiceAccount admission plugin's `kube-api-access-*` volume (a token for the pod's
own ServiceAccount from the TokenRequest API, ca.crt, namespace); the process finds
that folder in $GPUFLOW_SERVICE_ACCOUNT_DIR (operators/kube/client.py), so it acts
under its ServiceAccount and RBAC. Status is a kubelet's, written through the
status subresource with the pod's resourceVersion (a 409 rereads and retries): Running
with startTime, podIP (the pod's), hostIP (the node's) and `state.running.startedAt`;
at exit Succeeded (0) or Failed with `state.terminated` (exitCode, 128+N for signal
N, reason Completed or Error, startedAt, finishedAt). A configuration error (a missing
Secret key, no command, no free pod address, a volume source that cannot be read)
leaves it Pending with `waiting.reason` CreateContainerConfigError, retried. The pod's
conditions are a kubelet's (Initialized, ContainersReady, Ready), which ReplicaSets,
DaemonSets and `helm install --wait` count.
A graceful delete (the API server sets deletionTimestamp and deletionGracePeriodSeconds
on a bound pod that has not ended) sends SIGTERM to the group, SIGKILL after the grace
period, and once the process is gone deletes the pod for good (grace 0). The
downward-API files follow the pod's labels and annotations.
Given `tls` (kubelet_pki.py), it serves each pod's log file over HTTPS as a kubelet
does (kubelet_server.py) and names the port in its Node's status, so that the API
server proxies `kubectl logs` (and the gpuflow service's job logs) to it; a pod's log
stays readable until the pod is deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kubelet.admission import refusal
from gpuflow.sandbox.kubelet.heartbeat import HeartbeatConfig, NodeHeartbeat
from gpuflow.sandbox.kubelet.output import ContainerOutput
from gpuflow.sandbox.kubelet.pki import KubeletTls
from gpuflow.sandbox.kubelet.podenv import EnvError, command_line, process_env
from gpuflow.sandbox.kubelet.server import ContainerLog, KubeletServer, NoLog
from gpuflow.sandbox.kubelet.volumes import PodVolumes, Projections, VolumeError
from gpuflow.sandbox.network import NetworkError, NodeNetwork
from gpuflow.sandbox.processes import ProcessHook
from operators.kube import API_ERRORS, CONFLICT, NOT_FOUND, KubeApi, Obj, Resource, error_message
from operators.kube.client import SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DIR_ENV
from operators.kube.informer import Informer

log = logging.getLogger(__name__)

WORKER = "worker"
DEFAULT_GRACE_S = 30  # a pod's terminationGracePeriodSeconds default
CONFIG_RETRY_S = 2.0  # how soon a pod that could not be configured is tried again
STATUS_RETRIES = 5
# How old an address reserved for a pod this kubelet never saw must be before it is
# freed: far longer than a pod takes to reach the kubelet's cache after its creation.
RESERVATION_S = 60.0
# How long an exited process's last output may take to be copied into its log; longer
# only when a process it left behind still holds the pipe (the copy then goes on).
OUTPUT_DRAIN_S = 5.0
REPO_ROOT = Path(__file__).resolve().parents[3]


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker_container(pod: Obj) -> Obj:
    containers: list[Obj] = (pod.get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == WORKER), containers[0])


@dataclass
class _Run:
    """One pod's process."""

    namespace: str
    name: str
    container: str
    proc: subprocess.Popen[bytes]
    output: ContainerOutput
    volumes: PodVolumes
    started_at: str
    metadata_seen: tuple[str, str]
    kill_at: float | None = None  # monotonic: SIGKILL then, if still alive
    exited: bool = False


class ProcessKubelet:
    """The kubelet of one emulated node; `start()` it, `stop()` kills what it runs."""

    def __init__(
        self,
        api: KubeApi,
        node: str,
        network: NodeNetwork,
        sandbox_dir: Path,
        workdir: Path | None = None,
        heartbeat: HeartbeatConfig | None = None,
        dns_api: KubeApi | None = None,
        devices: Mapping[str, str] | None = None,
        on_start: ProcessHook | None = None,
        apiserver_host: str | None = None,
        tls: KubeletTls | None = None,
    ) -> None:
        self.api = api
        self.on_start = on_start  # told each pod's process (the sandbox records them)
        # KUBERNETES_SERVICE_HOST and _PORT: the API server at the port this kubelet's
        # client uses, on `apiserver_host` (where pods in network namespaces reach it)
        # or the client's own host.
        url = urllib.parse.urlsplit(str(api.client.configuration.host))
        self.service_env = {
            "KUBERNETES_SERVICE_HOST": apiserver_host or str(url.hostname),
            "KUBERNETES_SERVICE_PORT": str(url.port or 443),
        }
        self.projections = Projections(self._lookup, self._token)
        # What resolves a peer pod's DNS name (a cluster DNS's part, which may read any
        # pod): a node's own credentials may read only the pods bound to it.
        self.dns_api = dns_api or api
        self.node = node
        self.network = network
        self.heartbeat = NodeHeartbeat(api, node, network.address(node), heartbeat, devices)
        self.sandbox_dir = sandbox_dir
        self.workdir = workdir or REPO_ROOT
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        selector = f"spec.nodeName={node}"
        self.pods = Informer(
            api, Resource("pods", field_selector=selector), self.wake.set, watch_timeout_s=30
        )
        self._runs: dict[str, _Run] = {}  # pod uid -> its process
        self._done: set[str] = set()  # uids whose process ended and status was written
        self._deleted: set[str] = set()  # uids deleted for good (grace 0)
        self._retry_at: dict[str, float] = {}  # uid -> monotonic, for config errors
        self._threads: list[threading.Thread] = []
        # Serves the pods' logs to the API server's proxy (`kubectl logs`) when given TLS.
        self.server = (
            KubeletServer(
                network.address(node), tls, self.container_log, network.namespaces.get(node)
            )
            if tls is not None
            else None
        )

    def start(self) -> ProcessKubelet:
        """Start the log server if any, register the node (its Node exists, naming the
        server's port, when this returns), then run."""
        if self.server is not None:
            self.heartbeat.kubelet_port = self.server.start()
        self.heartbeat.register()
        # The informer's thread is not joined at stop(): it may be blocked in a watch
        # until the watch's timeout; as a daemon it ends with the watch or the process.
        informer = threading.Thread(
            target=self.pods.run, args=(self.stop_event,), daemon=True, name=f"pods-{self.node}"
        )
        informer.start()
        for target in (self.heartbeat.run, self._loop):
            t = threading.Thread(
                target=target, args=(self.stop_event,), daemon=True, name=f"kubelet-{self.node}"
            )
            t.start()
            self._threads.append(t)
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop watching; SIGTERM every process group, SIGKILL what outlives `grace_s`."""
        self.stop_event.set()
        self.heartbeat.stop()
        if self.server is not None:
            self.server.stop()
        self.wake.set()
        for t in self._threads:
            t.join(timeout=5)
        runs = [r for r in self._runs.values() if r.proc.poll() is None]
        for r in runs:
            _signal_group(r.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for r in runs:
            try:
                r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(r.proc, signal.SIGKILL)
                r.proc.wait()
        for r in self._runs.values():
            r.output.wait(OUTPUT_DRAIN_S)

    def processes(self) -> dict[str, int]:
        """Pod name -> pid of the processes still running (for tests and `up`)."""
        return {r.name: r.proc.pid for r in self._runs.values() if r.proc.poll() is None}

    def container_log(self, namespace: str, pod: str, container: str) -> ContainerLog:
        """Where the pod's container writes its output (the log server's lookup); NoLog
        with a kubelet's answer if it has not run here."""
        run = next(
            (r for r in list(self._runs.values()) if (r.namespace, r.name) == (namespace, pod)),
            None,
        )
        if run is None:
            known = any(
                (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, pod)
                for p in self.pods.items()
            )
            if not known:
                raise NoLog(404, f'pod "{pod}" in namespace "{namespace}" not found on {self.node}')
            raise NoLog(400, f'container "{container}" in pod "{pod}" is waiting to start')
        if container != run.container:
            msg = (
                f'container "{container}" in pod "{pod}" is not running: only {run.container} runs'
            )
            raise NoLog(400, msg)
        return ContainerLog(run.output.log, run.output.copying)

    # -- the loop ------------------------------------------------------------------------

    def _loop(self, stop: threading.Event) -> None:
        self.pods.synced.wait()
        while not stop.is_set():
            self.wake.clear()
            try:
                self._sync()
            except API_ERRORS as exc:
                log.warning("kubelet round failed node=%s error=%s", self.node, exc)
            self.wake.wait(self._next_wait_s())

    def _next_wait_s(self) -> float:
        now = time.monotonic()
        deadlines = [r.kill_at for r in self._runs.values() if r.kill_at and not r.exited]
        deadlines += list(self._retry_at.values())
        return max(0.01, min([now + 1.0, *deadlines]) - now)

    def _sync(self) -> None:
        live = set()
        for pod in self.pods.items():
            uid = pod["metadata"]["uid"]
            live.add(uid)
            if uid not in self._deleted:
                self._sync_pod(uid, pod)
        for uid, run in list(self._runs.items()):
            if uid not in live and not run.exited:
                # Deleted for good by someone else (force delete): nothing to report to.
                _signal_group(run.proc, signal.SIGKILL)
        for uid, run in list(self._runs.items()):
            if run.exited and uid not in live:
                del self._runs[uid]
                self.network.release_pod(uid)
        # Reserved for a pod that never ran here (a peer's MASTER_ADDR asked, then the
        # pod was deleted before it started): its address goes back too, once the
        # reservation is old enough that the pod would be in the cache were it alive.
        for uid in self.network.reserved_on(self.node, time.monotonic() - RESERVATION_S):
            if uid not in live and uid not in self._runs:
                self.network.release_pod(uid)

    def _sync_pod(self, uid: str, pod: Obj) -> None:
        meta = pod["metadata"]
        run = self._runs.get(uid)
        if run is not None and not run.exited and run.proc.poll() is not None:
            self._finish(uid, run)
        if meta.get("deletionTimestamp"):
            if run is None or run.exited:
                self._delete_for_good(uid, pod)
            else:
                self._terminate(run, pod)
            return
        if run is not None:
            seen = (str(meta.get("labels")), str(meta.get("annotations")))
            if seen != run.metadata_seen:
                run.volumes.refresh(pod)
                run.metadata_seen = seen
            return
        phase = (pod.get("status") or {}).get("phase", "Pending")
        retry_at = self._retry_at.get(uid, 0.0)
        pending = phase == "Pending" and uid not in self._done
        if pending and time.monotonic() >= retry_at and self._admit(uid, pod):
            self._start(uid, pod)

    def _admit(self, uid: str, pod: Obj) -> bool:
        """Whether the pod's extended resources fit what the node has left beside the
        processes running (admission.py); if not, it fails as a kubelet rejects it."""
        runs = {uid for uid, run in self._runs.items() if not run.exited}
        running = [p for p in self.pods.items() if p["metadata"]["uid"] in runs]
        refused = refusal(pod, lambda: self.api.get_node(self.node), running)
        if refused is None:
            return True
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        log.info("rejected pod=%s/%s: %s", ns, name, refused.message)
        self._done.add(uid)
        self._write_status(ns, name, refused.status())
        return False

    def _start(self, uid: str, pod: Obj) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        container = worker_container(pod)
        pod_dir = self.sandbox_dir / "pods" / f"{ns}_{name}_{uid[:8]}"
        try:
            volumes = PodVolumes(self.sandbox_dir, pod_dir, pod, self.projections)
            pod_ip = self.network.attach_pod(self.node, uid)
            env = process_env(
                pod,
                container,
                lookup=self._lookup,
                pod_ip=pod_ip,
                host_ip=self.network.address(self.node),
                mounts=volumes.mounts(container),
                resolve=self._pod_ip,
                service_env=self.service_env,
                resolve_service=self._service_endpoint,
            )
            account_dir = volumes.mounts(container).rewrite(SERVICE_ACCOUNT_DIR)
            if account_dir != SERVICE_ACCOUNT_DIR:  # the pod mounts its token
                env[SERVICE_ACCOUNT_DIR_ENV] = account_dir
            argv = command_line(container, env, self.workdir)
            interface = self.network.pod_interface(uid)
            if interface is not None:
                # A real pod's hostname resolves to its own address (the kubelet's
                # /etc/hosts); a process here resolves it to loopback, which gloo and
                # NCCL would then advertise to their peers: name the interface instead.
                env.setdefault("GLOO_SOCKET_IFNAME", interface)
                env.setdefault("NCCL_SOCKET_IFNAME", interface)
        except (EnvError, NetworkError, VolumeError) as exc:
            self._retry_at[uid] = time.monotonic() + CONFIG_RETRY_S
            waiting = {"reason": "CreateContainerConfigError", "message": str(exc)}
            self._write_status(ns, name, self._status(pod, container, {"waiting": waiting}))
            return
        self._retry_at.pop(uid, None)
        pod_dir.mkdir(parents=True, exist_ok=True)
        output = ContainerOutput(pod_dir / f"{container['name']}.log")
        started = now_rfc3339()
        try:
            proc = subprocess.Popen(
                [*self.network.exec_prefix(self.node, uid), *argv],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output.fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, signalled as a whole
            )
        except OSError as exc:  # no such program, not executable: as a runtime reports
            output.abandon()
            self._done.add(uid)
            terminated = {
                "exitCode": 128,
                "reason": "ContainerCannotRun",
                "message": str(exc),
                "startedAt": started,
                "finishedAt": started,
            }
            status = self._status(pod, container, {"terminated": terminated}, phase="Failed")
            self._write_status(ns, name, status)
            return
        output.started()
        if self.on_start is not None:
            self.on_start(proc.pid, f"pod {ns}/{name}")
        seen = (str(meta.get("labels")), str(meta.get("annotations")))
        run = _Run(ns, name, container["name"], proc, output, volumes, started, seen)
        self._runs[uid] = run
        threading.Thread(target=self._await_exit, args=(proc,), daemon=True).start()
        log.info("started pod=%s/%s node=%s pid=%d ip=%s", ns, name, self.node, proc.pid, pod_ip)
        running = {"running": {"startedAt": started}}
        status = self._status(pod, container, running, phase="Running", start_time=started)
        self._write_status(ns, name, status)

    def _await_exit(self, proc: subprocess.Popen[bytes]) -> None:
        proc.wait()
        self.wake.set()

    def _finish(self, uid: str, run: _Run) -> None:
        run.exited = True
        # Its last output copied before the status says it ended: a reader of a
        # finished pod's log gets all of it.
        run.output.wait(OUTPUT_DRAIN_S)
        code = run.proc.returncode
        exit_code = 128 - code if code < 0 else code  # killed by signal N: 128+N
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": now_rfc3339(),
        }
        phase = "Succeeded" if exit_code == 0 else "Failed"
        log.info("exited pod=%s/%s code=%d phase=%s", run.namespace, run.name, exit_code, phase)
        pod = self._read(run.namespace, run.name)
        if pod is not None and pod["metadata"]["uid"] == uid:
            container = {"name": run.container}
            status = self._status(pod, container, {"terminated": terminated}, phase=phase)
            self._write_status(run.namespace, run.name, status)
        self._done.add(uid)

    def _terminate(self, run: _Run, pod: Obj) -> None:
        if run.kill_at is not None:
            if time.monotonic() >= run.kill_at:
                log.info("grace period over pod=%s/%s: SIGKILL", run.namespace, run.name)
                _signal_group(run.proc, signal.SIGKILL)
                run.kill_at = float("inf")
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        run.kill_at = time.monotonic() + float(grace)
        log.info("SIGTERM pod=%s/%s grace_s=%s", run.namespace, run.name, grace)
        _signal_group(run.proc, signal.SIGTERM)

    def _delete_for_good(self, uid: str, pod: Obj) -> None:
        meta = pod["metadata"]
        self.network.release_pod(uid)  # first, as a kubelet removes the pod's sandbox
        self.api.delete_pod(meta["namespace"], meta["name"], 0)
        self._deleted.add(uid)

    # -- API helpers ---------------------------------------------------------------------

    def _status(
        self,
        pod: Obj,
        container: Obj,
        state: Obj,
        *,
        phase: str | None = None,
        start_time: str | None = None,
    ) -> Obj:
        status: Obj = dict(pod.get("status") or {})
        status["phase"] = phase or status.get("phase") or "Pending"
        if start_time:
            status["startTime"] = start_time
        host_ip = self.network.address(self.node)
        status.update({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}]})
        ip = self.network.reserved_address(self.node, pod["metadata"]["uid"])
        if ip is not None:
            status.update({"podIP": ip, "podIPs": [{"ip": ip}]})
        running = "running" in state
        status["conditions"] = _conditions(status, running, now_rfc3339())
        status["containerStatuses"] = [
            {
                "name": container["name"],
                "state": state,
                "ready": running,
                "started": running,
                "restartCount": 0,
                "image": str(container.get("image", "")),
                "imageID": "",
            }
        ]
        return status

    def _write_status(self, ns: str, name: str, status: Obj) -> None:
        """Replace the pod's status with its resourceVersion; on 409 reread and retry."""
        for _ in range(STATUS_RETRIES):
            pod = self._read(ns, name)
            if pod is None:
                return
            body = {**pod, "status": status}
            try:
                self.api.core.replace_namespaced_pod_status(
                    name, ns, body, _preload_content=False
                ).read()
                return
            except ApiException as exc:
                if exc.status == NOT_FOUND:
                    return
                if exc.status != CONFLICT:
                    raise
        log.warning("status not written pod=%s/%s: conflicts", ns, name)

    def _read(self, ns: str, name: str) -> Obj | None:
        return self._get("pods", ns, name)

    def _get(self, kind: str, ns: str, name: str) -> Obj | None:
        read = {
            "pods": self.api.core.read_namespaced_pod,
            "secrets": self.api.core.read_namespaced_secret,
            "configmaps": self.api.core.read_namespaced_config_map,
        }[kind]
        try:
            resp = read(name, ns, _preload_content=False)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        obj: Obj = json.loads(resp.data)
        return obj

    def _lookup(self, kind: str, ns: str, name: str) -> Obj | None:
        return self._get(kind, ns, name)

    def _token(self, pod: Obj, audience: str | None, expiration_s: int) -> str:
        """A token of the pod's ServiceAccount bound to the pod (TokenRequest), as the
        kubelet's token manager asks for it with the node's credentials."""
        meta = pod["metadata"]
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        body = {
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": expiration_s,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            }
        }
        try:
            resp = self.api.core.create_namespaced_service_account_token(
                account, meta["namespace"], body, _preload_content=False
            )
        except ApiException as exc:
            raise VolumeError(
                f"token of serviceaccount {meta['namespace']}/{account}: {error_message(exc)}"
            ) from None
        return str(json.loads(resp.data)["status"]["token"])

    def _service_endpoint(self, ns: str, service: str, port: int) -> tuple[str, int] | None:
        """A ready pod behind the Service and the target port of its `port`, the first
        by name (kube-proxy picks one at random per connection; one is enough for a
        process that resolves once); None if the Service or a ready pod is missing.
        Read with `dns_api`, as a cluster DNS reads Services and their endpoints."""
        try:
            resp = self.dns_api.core.read_namespaced_service(service, ns, _preload_content=False)
            svc: Obj = json.loads(resp.data)
            selector = (svc.get("spec") or {}).get("selector") or {}
            entry = next(
                (p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("port") == port),
                None,
            )
            if not selector or entry is None:
                return None
            labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            resp = self.dns_api.core.list_namespaced_pod(
                ns, label_selector=labels, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        pods: list[Obj] = json.loads(resp.data).get("items") or []
        for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
            ip = (pod.get("status") or {}).get("podIP")
            target = _target_port(pod, entry.get("targetPort", port))
            if ip and _ready(pod) and target is not None:
                return str(ip), target
        return None

    def _pod_ip(self, ns: str, name: str) -> str | None:
        """A pod's IP once it is bound to a node: reserved now if its kubelet has not
        started it yet (the rank-0 pod need not have); None if unbound or none free.
        Read with `dns_api`: the pod is often another node's."""
        try:
            resp = self.dns_api.core.read_namespaced_pod(name, ns, _preload_content=False)
        except ApiException as exc:
            if exc.status == NOT_FOUND:
                return None
            raise
        pod: Obj = json.loads(resp.data)
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return None
        try:
            return self.network.pod_address(str(node), pod["metadata"]["uid"])
        except NetworkError as exc:
            log.warning("no address for pod=%s/%s error=%s", ns, name, exc)
            return None


def _target_port(pod: Obj, target: Any) -> int | None:
    """A Service port's targetPort on `pod`: a number, or a container port's name."""
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


def _conditions(status: Obj, running: bool, now: str) -> list[Obj]:
    """The pod's conditions as a kubelet keeps them (status.generateAPIPodStatus):
    Initialized (no init containers are run), ContainersReady and Ready true while the
    container runs (there are no probes), false otherwise with the kubelet's reasons;
    the scheduler's PodScheduled and any other kept. A condition whose status is
    unchanged keeps its lastTransitionTime. Ready is what a ReplicaSet's and a
    DaemonSet's ready counts, and `helm install --wait`, read."""
    phase = status.get("phase")
    if running:
        ready: Obj = {"status": "True"}
    elif phase in ("Succeeded", "Failed"):
        ready = {"status": "False", "reason": "PodCompleted"}
    else:
        ready = {"status": "False", "reason": "ContainersNotReady"}
    ours = {
        "Initialized": {"status": "True"},
        "ContainersReady": ready,
        "Ready": ready,
    }
    kept = [c for c in status.get("conditions") or [] if c.get("type") not in ours]
    before = {c.get("type"): c for c in status.get("conditions") or []}
    for kind, condition in ours.items():
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == condition["status"] else None
        kept.append({"type": kind, **condition, "lastTransitionTime": since or now})
    return kept


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _signal_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, sig)
