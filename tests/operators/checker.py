"""A watcher that checks, at every pod event, that no GPU is double-booked and that
no job runs two attempts at once.

It keeps its own list-and-watch of every pod and, after each change, sums the shares
of each GPU UUID over the pods not finished (terminating ones included: their
containers still run until the kubelet's final delete). More than one whole GPU is a
violation, recorded with the pods involved; so is a job with unfinished pods of two
attempts (a new attempt made before the old one's SIGTERM checkpoint was written).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from operators import crd
from operators.kube import KubeApi, Resource
from operators.kube.informer import Informer
from operators.pods import finished, pod_attempt, pod_shares

EPS = 1e-9


class DoubleBookingChecker:
    def __init__(self, client: Any) -> None:
        self.violations: list[str] = []
        self.checks = 0
        self.max_pods = 0
        self._informer = Informer(KubeApi(client), Resource("pods"), self._check, watch_timeout_s=5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._informer.run, args=(self._stop,), daemon=True)

    def start(self) -> DoubleBookingChecker:
        self._thread.start()
        self._informer.synced.wait(10)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _check(self) -> None:
        used: dict[str, float] = defaultdict(float)
        holders: dict[str, list[str]] = defaultdict(list)
        pods = [p for p in self._informer.items() if not finished(p)]
        self.max_pods = max(self.max_pods, len(pods))
        attempts: dict[str, set[int]] = defaultdict(set)
        for pod in pods:
            job = (pod["metadata"].get("labels") or {}).get(crd.LABEL_JOB, "")
            attempts[job].add(pod_attempt(pod))
            for share in pod_shares(pod):
                used[share.uuid] += share.fraction
                holders[share.uuid].append(pod["metadata"]["name"])
        self.checks += 1
        for uuid, total in used.items():
            if total > 1.0 + EPS:
                self.violations.append(f"{uuid}: {total:g} held by {sorted(holders[uuid])}")
        for job, seen in attempts.items():
            if len(seen) > 1:
                self.violations.append(f"job {job}: attempts {sorted(seen)} at once")
