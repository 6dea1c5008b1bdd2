"""A kubelet simulator for operator tests: there is no real kubelet on the test server.

It watches pods bound to nodes (spec.nodeName set) and plays their workload: a pod
goes Running at once and Succeeded after the job's remaining time, the duration the
test put in the container's GPUFLOW_TEST_DURATION_S env times `time_scale`. A pod
deleted gracefully gets "SIGTERM": the job checkpoints the progress of its rank 0
(so a restart resumes from it), and the pod is deleted for good (grace 0) after
`sigterm_s`, as a kubelet does once the container exits. Status writes go through
the status subresource with the pod's resourceVersion, retried on 409.
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from operators import crd
from operators.informer import Informer
from operators.kube import KubeApi, Resource
from tests.operators.builders import DURATION_ENV

log = logging.getLogger(__name__)


class Kubelet:
    def __init__(self, client: Any, *, time_scale: float = 1.0, sigterm_s: float = 0.05) -> None:
        self.api = KubeApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.time_scale = time_scale
        self.sigterm_s = sigterm_s
        self.wake = threading.Event()
        self.pods = Informer(self.api, Resource("pods"), self.wake.set, watch_timeout_s=5)
        self.stop_event = threading.Event()
        self.progress_s: dict[str, float] = {}  # job -> checkpointed seconds of work
        self._started: dict[str, float] = {}  # pod uid -> monotonic start
        self._timers: list[tuple[float, str, str, str]] = []  # (at, kind, ns, name)
        self._done: set[str] = set()  # pod uids handled to the end
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
        for pod in self.pods.items():
            self._see(pod, now)
        while self._timers and self._timers[0][0] <= now:
            _, kind, ns, name = heapq.heappop(self._timers)
            if kind == "finish":
                self._finish(ns, name)
            else:
                self.api.delete_pod(ns, name, 0)

    def _see(self, pod: dict[str, Any], now: float) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        if not spec.get("nodeName") or uid in self._done:
            return
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        job = (meta.get("labels") or {}).get(crd.LABEL_JOB, meta["name"])
        if meta.get("deletionTimestamp"):
            self._done.add(uid)
            started = self._started.get(uid)
            if started is not None and phase == "Running" and _rank(pod) == 0:
                ran = (now - started) / self.time_scale
                self.progress_s[job] = self.progress_s.get(job, 0.0) + ran  # the checkpoint
            at = now + self.sigterm_s
            heapq.heappush(self._timers, (at, "kill", meta["namespace"], meta["name"]))
            return
        if phase == "Pending" and uid not in self._started:
            self._started[uid] = now
            self._set_phase(meta["namespace"], meta["name"], "Running")
            left = max(0.0, _duration(pod) - self.progress_s.get(job, 0.0))
            at = now + left * self.time_scale
            heapq.heappush(self._timers, (at, "finish", meta["namespace"], meta["name"]))

    def _finish(self, ns: str, name: str) -> None:
        pod = self.pods.get((ns, name))
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        if pod["metadata"]["uid"] in self._done:
            return
        self._done.add(pod["metadata"]["uid"])
        self._set_phase(ns, name, "Succeeded")

    def _set_phase(self, ns: str, name: str, phase: str) -> None:
        for _ in range(10):
            try:
                pod = self.core.read_namespaced_pod(name, ns, _preload_content=False)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            body = json.loads(pod.data)
            if body["metadata"].get("deletionTimestamp"):
                return
            body.setdefault("status", {})["phase"] = phase
            try:
                self.core.replace_namespaced_pod_status(name, ns, body, _preload_content=False)
                return
            except kubernetes.client.ApiException as exc:
                if exc.status not in (409, 404):
                    raise
                if exc.status == 404:
                    return


def _env(pod: dict[str, Any]) -> dict[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {e["name"]: e.get("value", "") for e in containers[0].get("env") or []}


def _duration(pod: dict[str, Any]) -> float:
    return float(_env(pod).get(DURATION_ENV, "0.5"))


def _rank(pod: dict[str, Any]) -> int:
    return int((pod["metadata"].get("annotations") or {}).get(crd.ANN_RANK, 0))
