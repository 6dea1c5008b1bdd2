"""A kubelet simulator for operator tests: the control plane's nodes have no real kubelet.

It watches pods bound to nodes (spec.nodeName set) and plays their workload: a pod
goes Running at once and Succeeded after the job's remaining time, the duration the
test put in the container's GPUFLOW_TEST_DURATION_S env times `time_scale`. A pod
deleted gracefully gets "SIGTERM": the job checkpoints the progress of its rank 0
(so a restart resumes from it), and the pod is deleted for good (grace 0) after
`sigterm_s`, as a kubelet does once the container exits. Status writes go through
the status subresource with the pod's resourceVersion, retried on 409.

It reports what a real kubelet does: `status.startTime`, and the worker container's
state (`running.startedAt`; `terminated` with exitCode, reason, startedAt,
finishedAt; `waiting` with a reason), times at the API's one-second resolution.
A running pod gets an address of its own, `status.podIP` (and `podIPs`), from
POD_SUBNET in start order, as a CNI would hand out. A pod that requests more of an
extended resource (nvidia.com/gpu, gpuflow.dev/gpu-share) than its node's allocatable
has left beside the pods running there is rejected as a kubelet rejects it
(gpuflow/sandbox/kubelet/admission.py): Failed, reason OutOf<resource>, never run.
Tests can fail a pod with an exit code (`fail`), leave the pods of chosen jobs
Pending for ever as if their image never pulled (`never_start`; their deletion still
completes) or with a configuration error (`config_error`:
CreateContainerConfigError), and make a SIGTERMed worker exit with a code first
(`sigterm_exit`, e.g. the checkpoint exit code), as a job library that checkpoints on
SIGTERM does.
"""

from __future__ import annotations

import heapq
import ipaddress
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from gpuflow.sandbox.kubelet.admission import Refusal, refusal
from operators import crd
from operators.kube import KubeApi, Resource
from operators.kube.calls import drain
from operators.kube.informer import Informer
from tests.operators.builders import DURATION_ENV

log = logging.getLogger(__name__)


WORKER = "worker"  # the worker container's name in pods of the shorthand spec
FINISHED = ("Succeeded", "Failed")
POD_SUBNET = "10.88.0.0/16"  # podman's default CNI range: pod IPs, never routed here


class Kubelet:
    def __init__(
        self,
        client: Any,
        *,
        time_scale: float = 1.0,
        sigterm_s: float = 0.05,
        sigterm_exit: int | None = None,
        never_start: Iterable[str] = (),
        config_error: Iterable[str] = (),
    ) -> None:
        self.api = KubeApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.time_scale = time_scale
        self.sigterm_s = sigterm_s
        self.sigterm_exit = sigterm_exit  # None: a SIGTERMed pod is removed at once
        self.never_start = set(never_start)  # jobs whose pods stay Pending
        # Jobs whose pods stay Pending with CreateContainerConfigError (a Secret missing).
        self.config_error = set(config_error)
        self._failures: queue.SimpleQueue[tuple[str, str, int]] = queue.SimpleQueue()
        self.wake = threading.Event()
        self.pods = Informer(self.api, Resource("pods"), self.wake.set, watch_timeout_s=5)
        self.stop_event = threading.Event()
        self.progress_s: dict[str, float] = {}  # job -> checkpointed seconds of work
        self._started: dict[str, float] = {}  # pod uid -> monotonic start
        self._ips = ipaddress.ip_network(POD_SUBNET).hosts()
        self._timers: list[tuple[float, str, str, str]] = []  # (at, kind, ns, name)
        self._done: set[str] = set()  # pod uids handled to the end
        self._removed: set[str] = set()  # finished pods whose deletion was completed
        self._threads: list[threading.Thread] = []

    def start(self) -> Kubelet:
        for target in (self.pods.run, self._loop):
            t = threading.Thread(target=target, args=(self.stop_event,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        for t in self._threads:
            t.join(timeout=10)

    def fail(self, namespace: str, name: str, exit_code: int) -> None:
        """Make the pod's worker exit with `exit_code` now (the pod goes Failed)."""
        self._failures.put((namespace, name, exit_code))
        self.wake.set()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            timeout = 0.2
            if self._timers:
                timeout = max(0.0, min(timeout, self._timers[0][0] - time.monotonic()))
            self.wake.wait(timeout)
            self.wake.clear()
            try:
                self._step()
            except Exception as exc:  # keep simulating; the next step retries
                log.warning("kubelet: %s", exc)

    def _step(self) -> None:
        now = time.monotonic()
        while not self._failures.empty():
            ns, name, code = self._failures.get()
            pod = self.pods.get((ns, name))
            uid = None if pod is None else pod["metadata"]["uid"]
            if (
                uid is not None
                and uid not in self._done
                and self._set_status(ns, name, _terminated(code))
            ):
                self._done.add(uid)
        for pod in self.pods.items():
            self._see(pod, now)
        while self._timers and self._timers[0][0] <= now:
            _, kind, ns, name = heapq.heappop(self._timers)
            if kind == "finish":
                self._finish(ns, name)
            elif kind == "kill-running" and self.sigterm_exit is not None:
                # The worker exits; the kubelet removes the pod a moment later.
                self._set_status(ns, name, _terminated(self.sigterm_exit), terminating=True)
                heapq.heappush(self._timers, (now + self.sigterm_s, "kill", ns, name))
            else:
                self.api.delete_pod(ns, name, 0)

    def _see(self, pod: dict[str, Any], now: float) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if meta.get("deletionTimestamp") and phase in FINISHED and uid not in self._removed:
            self._removed.add(uid)  # nothing runs: the deletion completes at once
            heapq.heappush(self._timers, (now, "kill", meta["namespace"], meta["name"]))
            return
        if not spec.get("nodeName") or uid in self._done:
            return
        job = (meta.get("labels") or {}).get(crd.LABEL_JOB, meta["name"])
        if meta.get("deletionTimestamp"):
            self._done.add(uid)
            started = self._started.get(uid)
            if started is not None and phase == "Running" and _rank(pod) == 0:
                ran = (now - started) / self.time_scale
                self.progress_s[job] = self.progress_s.get(job, 0.0) + ran  # the checkpoint
            at = now + self.sigterm_s
            self._removed.add(uid)
            kind = "kill-running" if phase == "Running" else "kill"
            heapq.heappush(self._timers, (at, kind, meta["namespace"], meta["name"]))
            return
        if phase == "Pending" and job in self.never_start | self.config_error:
            if not (pod.get("status") or {}).get("containerStatuses"):
                waiting = {"waiting": {"reason": "ImagePullBackOff"}}
                if job in self.config_error:
                    message = f'secret "{job}-token" not found'
                    waiting = {"waiting": {"reason": "CreateContainerConfigError",
                                           "message": message}}  # fmt: skip
                self._set_status(meta["namespace"], meta["name"], _phase("Pending", waiting))
            return
        if phase == "Pending" and uid not in self._started:
            refused = self._refusal(pod)
            if refused is not None:  # as a kubelet rejects a pod: Failed, no containers
                self._done.add(uid)
                self._set_status(meta["namespace"], meta["name"], _rejected(refused.status()))
                return
            self._started[uid] = now
            running = {"running": {"startedAt": _now()}}
            ip = str(next(self._ips))
            self._set_status(meta["namespace"], meta["name"], _phase("Running", running, ip))
            left = max(0.0, _duration(pod) - self.progress_s.get(job, 0.0))
            at = now + left * self.time_scale
            heapq.heappush(self._timers, (at, "finish", meta["namespace"], meta["name"]))

    def _refusal(self, pod: dict[str, Any]) -> Refusal | None:
        """The node's refusal of the pod's extended resources beside the pods started
        on it that have not finished (admission.py), or None."""
        node = pod["spec"]["nodeName"]
        running = [
            p
            for p in self.pods.items()
            if (p.get("spec") or {}).get("nodeName") == node
            and p["metadata"]["uid"] in self._started
            and (p.get("status") or {}).get("phase") not in FINISHED
        ]
        return refusal(pod, lambda: self.api.get_node(node), running)

    def _finish(self, ns: str, name: str) -> None:
        pod = self.pods.get((ns, name))
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        if pod["metadata"]["uid"] in self._done:
            return
        # Done only if the exit was written: a pod whose deletion began meanwhile is
        # left to `_see`, which kills it (else it would stay Running, deleting, forever).
        if self._set_status(ns, name, _terminated(0)):
            self._done.add(pod["metadata"]["uid"])

    def _set_status(
        self,
        ns: str,
        name: str,
        change: Callable[[dict[str, Any]], None],
        terminating: bool = False,
    ) -> bool:
        """Apply `change` to the pod's status; a pod being deleted is left alone unless
        `terminating` (its container exiting on SIGTERM). Whether it was applied."""
        for _ in range(10):
            try:
                pod = self.core.read_namespaced_pod(name, ns, _preload_content=False)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            body = json.loads(pod.data)
            if body["metadata"].get("deletionTimestamp") and not terminating:
                return False
            change(body.setdefault("status", {}))
            try:
                # Read to the end: an unread response stays the client's last_response,
                # holding its socket until the client is collected.
                drain(
                    self.core.replace_namespaced_pod_status(name, ns, body, _preload_content=False)
                )
                return True
            except kubernetes.client.ApiException as exc:
                if exc.status not in (409, 404):
                    raise
                if exc.status == 404:
                    return False
        return False


def _now() -> str:
    """Now as the API server stores times: RFC 3339 to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _phase(
    phase: str, state: dict[str, Any], ip: str | None = None
) -> Callable[[dict[str, Any]], None]:
    """Set the pod's phase and its worker container's state, as the kubelet reports;
    `ip`: the pod's address, once its sandbox is up."""

    def change(status: dict[str, Any]) -> None:
        status["phase"] = phase
        if ip is not None:
            status["podIP"], status["podIPs"] = ip, [{"ip": ip}]
        if phase != "Pending":
            status.setdefault("startTime", _now())
        running = "running" in state
        status["containerStatuses"] = [
            {
                "name": WORKER,
                "image": "busybox",
                "imageID": "",
                "ready": running,
                "started": running,
                "restartCount": 0,
                "state": state,
            }
        ]

    return change


def _rejected(status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(current: dict[str, Any]) -> None:
        current.clear()
        current.update(status)

    return change


def _terminated(code: int) -> Callable[[dict[str, Any]], None]:
    """The worker exited with `code`: Succeeded if 0, else Failed (restartPolicy Never)."""

    def change(status: dict[str, Any]) -> None:
        old = (status.get("containerStatuses") or [{}])[0].get("state") or {}
        started = (old.get("running") or {}).get("startedAt") or _now()
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": _now(),
        }
        _phase("Succeeded" if code == 0 else "Failed", {"terminated": terminated})(status)

    return change


def _env(pod: dict[str, Any]) -> dict[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {e["name"]: e.get("value", "") for e in containers[0].get("env") or []}


def _duration(pod: dict[str, Any]) -> float:
    return float(_env(pod).get(DURATION_ENV, "0.5"))


def _rank(pod: dict[str, Any]) -> int:
    return int((pod["metadata"].get("annotations") or {}).get(crd.ANN_RANK, 0))
