"""The operator's main loop: informers, leader election, and a round per change.

`gpuflow operator run` (gpuflow/operator_cmd.py) builds an `Operator` and calls
`run()`. Three informers (DLJobs, the operator's pods, Nodes) keep caches and wake
the loop on every change; a Lease elects the one replica that schedules. Each round,
when leading and synced: `backend.sync()` settles finished, failed and deleted
jobs, then `Controller.decide(backend)` observes, runs the policy and applies the
plan: the same controller that drives the simulator. Rounds run at most every
`min_gap_s` (changes are batched) and at least every `interval_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from controller.loop import Controller
from operators import crd
from operators.backend import Caches, KubeBackend
from operators.informer import Informer
from operators.kube import KubeApi, Resource
from operators.leader import LeaderElector, LeaseConfig
from policies.registry import make_policy

log = logging.getLogger(__name__)

EXIT_LOST_LEASE = 1


@dataclass(frozen=True)
class OperatorConfig:
    identity: str
    policy: str = "fifo"
    placement: str = "consolidated"
    namespace: str | None = None  # None: DLJobs of every namespace
    interval_s: float = 5.0
    min_gap_s: float = 0.05
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    watch_timeout_s: int = 60


class Operator:
    def __init__(self, api: KubeApi, config: OperatorConfig) -> None:
        self.api = api
        self.config = config
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        on_change = self.wake.set
        pods = Resource("pods", f"{crd.LABEL_MANAGED}={crd.MANAGER}")
        self.caches = Caches(
            dljobs=Informer(
                api, Resource("dljobs"), on_change, watch_timeout_s=config.watch_timeout_s
            ),
            pods=Informer(api, pods, on_change, watch_timeout_s=config.watch_timeout_s),
            nodes=Informer(
                api, Resource("nodes"), on_change, watch_timeout_s=config.watch_timeout_s
            ),
        )
        self.elector = LeaderElector(api, config.identity, config.lease)
        self.controller = Controller(make_policy(config.policy))
        self.backend = KubeBackend(
            api,
            self.caches,
            placement=config.placement,
            policy_name=lambda: self.controller.policy.name,
            leading=self.elector.leading,
        )
        self.rounds = 0
        self._threads: list[threading.Thread] = []

    def start_threads(self) -> None:
        for name, target in [
            ("dljobs", self.caches.dljobs.run),
            ("pods", self.caches.pods.run),
            ("nodes", self.caches.nodes.run),
            ("lease", self.elector.run),
        ]:
            t = threading.Thread(target=target, args=(self.stop_event,), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def run(self) -> int:
        """Run until stopped (0) or the lease is lost (EXIT_LOST_LEASE)."""
        self.start_threads()
        last = 0.0
        while not self.stop_event.is_set():
            self.wake.wait(self.config.interval_s)
            if self.elector.lost.is_set():
                self.stop()
                return EXIT_LOST_LEASE
            gap = self.config.min_gap_s - (time.monotonic() - last)
            if gap > 0:
                self.stop_event.wait(gap)
            self.wake.clear()
            if not (self.elector.leading() and self.caches.synced()):
                continue
            last = time.monotonic()
            try:
                self.round()
            except Exception:  # a round that fails is retried; the loop lives on
                log.exception("round failed")
                self.stop_event.wait(self.config.min_gap_s)
                self.wake.set()
        return 0

    def round(self) -> None:
        self.backend.sync()
        self.backend.writer.flush()
        self.controller.decide(self.backend)
        if self.backend.cluster_changed:
            # Node indices moved: the policy's memory may name the old ones.
            self.controller.set_policy(self.controller.policy)
            self.backend.cluster_changed = False
        self.rounds += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        self.backend.writer.close()
