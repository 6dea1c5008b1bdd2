"""The operator's main loop: informers, leader election, and a round per change.

`gpuflow operator run` (gpuflow/operator_cmd.py) builds an `Operator` and calls
`run()`. Three informers (DLJobs, the operator's pods, Nodes) keep caches and wake
the loop on every change; a Lease elects the one replica that schedules. Each round,
when leading and synced: `backend.sync()` settles finished, failed and deleted
jobs, then `Controller.decide(backend)` observes, runs the policy and applies the
plan: the same controller that drives the simulator. Rounds run at most every
`min_gap_s` (changes are batched) and at least every `interval_s`, or sooner when
the backend has a deadline (`next_wake_s`: the plan's `wake_s`, a back-off ending).

A replica that loses the Lease (it could not renew within the renew deadline: an API
server frozen, a partition) steps down and stays in the election: it writes nothing
from then on (every write asks `_acting()`: leading, in the term its state was built
for), and when it leads again it starts the new term from a fresh state, the
controller, backend and writer a restarted operator would have, rebuilt from the
informers' caches (which stay up through it all). Whatever the old term had decided
and not written is dropped; the new term's first round sees the cluster as it is.

`stop()` (SIGTERM) only asks; `run()` then finishes its round, waits for the writes,
releases the Lease (a standby leads at its next retry) and returns. Metrics
(operators/metrics.py) are served on `metrics_port`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from wsgiref.simple_server import WSGIServer

from controller.decisions import RoundRecord, record_round
from controller.loop import Controller
from controller.model import Plan, Snapshot
from controller.model.perf.matrix import ThroughputMatrix
from controller.model.quotas import QuotaTree
from operators import crd
from operators.backend import KubeBackend
from operators.kube import API_ERRORS, KubeApi, Resource
from operators.kube.informer import Caches, Informer
from operators.kube.leader import LeaderElector, LeaseConfig
from operators.logs import emit, one_line
from operators.metrics import OperatorMetrics
from operators.network.phases import make_network_publisher
from operators.policy_config import PolicyWatch, RunningPolicy, parse_options, publish_running
from operators.quotas.tree import QuotaReader, QuotaStatusWriter, quota_statuses, reclaimed
from operators.writer import Writer
from policies.option_text import options_for
from policies.registry import UnknownPolicyError, make_policy

log = logging.getLogger(__name__)

# What to do when the DLJob list answers 404 (logged by the DLJob informer).
CRD_MISSING = (
    "the DLJob CRD is not installed: run kubectl apply -f helm/gpuflow/crds/dljob.yaml"
    " (or start the operator with --install-crd)"
)
# How long stopping waits for the lease thread to finish a request in flight.
STOP_JOIN_S = 5.0
# How often a round reads the policy ConfigMap: a switch is seen within this (plus
# the wait for the next round) at the cost of one GET.
POLICY_READ_S = 2.0


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
    metrics_port: int | None = None  # None: no /metrics; 0: any free port (tests)
    api_url: str = ""  # the API's REST root as worker pods reach it; "": not given to pods
    # The network allocator whose rates the nodes enforce (operators/network/__init__.py), a
    # phase network whose slots or priorities reach the pods (cassini, crux:
    # operators/network/phases.py), or "dedicated": none.
    network: str = "fair"
    # Policy options as (policy, key, value), "" for any policy: each applies whenever
    # its policy is the active one (at start or after a switch), as replay's --policy-opt.
    policy_options: tuple[tuple[str, str, Any], ...] = ()
    # A throughput matrix (`--throughputs`): the rate model's speeds and pair rates, as a
    # replay's; None: the performance model alone.
    throughputs: ThroughputMatrix | None = None

    def options_for(self, policy: str) -> dict[str, Any]:
        return options_for(self.policy_options, policy)


class Operator:
    def __init__(self, api: KubeApi, config: OperatorConfig) -> None:
        self.api = api
        self.config = config
        self.metrics = OperatorMetrics()
        api.on_error = self.metrics.api_error
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        on_change = self.wake.set
        timeout = config.watch_timeout_s
        pods = Resource("pods", f"{crd.LABEL_MANAGED}={crd.MANAGER}")
        self.caches = Caches(
            dljobs=Informer(
                api,
                Resource("dljobs"),
                on_change,
                watch_timeout_s=timeout,
                missing_hint=CRD_MISSING,
            ),
            pods=Informer(api, pods, on_change, watch_timeout_s=timeout),
            nodes=Informer(api, Resource("nodes"), on_change, watch_timeout_s=timeout),
        )
        self.elector = LeaderElector(
            api, config.identity, config.lease, on_change=self._leading_changed
        )
        # The term this replica's state (controller, backend, writer) belongs to; None:
        # not led yet. Writes happen only while leading in this term.
        self._term: int | None = None
        # The policy in effect and its options: a ConfigMap read that changes neither
        # keeps the policy (and its state).
        options = config.options_for(config.policy)
        self._policy_in_effect: tuple[str, dict[str, Any]] = (config.policy, options)
        # An admin's choice (PUT /policies/active) in ConfigMap gpuflow-policy of the
        # operator's namespace (its Lease's) overrides --policy: operators/policy_config.
        self.policy_watch = PolicyWatch(api, config.lease.namespace, every_s=POLICY_READ_S)
        # The quota tree (Quota resources, and deprecated Queues), read each round; each
        # object's status written.
        self.quota_reader = QuotaReader(api)
        self._fresh_state()
        self.rounds = 0
        # The record of the round in progress (who displaced whom), for its metrics;
        # None when its policy did not decide.
        self._round_record: RoundRecord | None = None
        self.metrics_server: WSGIServer | None = None
        self._threads: list[threading.Thread] = []
        self._lease_thread: threading.Thread | None = None

    def _fresh_state(self) -> None:
        """The controller, backend, writers and network publisher of a new term, as a
        restarted operator has them: nothing of a previous term's plans, pending
        writes, back-offs, reclaim counts or policy memory."""
        name, options = self._policy_in_effect
        # Paced: the policy decides at a replay's moments (controller.pace), not at
        # every informer event; rounds in between carry out what it decided.
        self.controller = Controller(make_policy(name, **options), paced=True)
        self.controller.on_round = self._record_round
        writer = Writer(
            self.api, self.caches, self._acting, self.metrics, api_url=self.config.api_url
        )
        self.backend = KubeBackend(
            self.api,
            self.caches,
            placement=self.config.placement,
            matrix=self.config.throughputs,
            policy_name=lambda: self.controller.policy.name,
            leading=self._acting,
            writer=writer,
        )
        self.quota_writer = QuotaStatusWriter(self.api)
        self.reclaims: Counter[str] = Counter()
        # The policy and options this term last wrote into the ConfigMap (None: none yet).
        self._published: tuple[str, dict[str, Any]] | None = None
        self.network = make_network_publisher(self.config.network, self.backend.writer)

    def _acting(self) -> bool:
        """Whether this replica may write now: it leads, in the term of its state."""
        term = self.elector.leading_term()
        return term is not None and term == self._term

    def begin_term(self, term: int) -> None:
        """Take up a term just won: after an earlier one (the Lease was lost and won
        back), drop that term's state and start afresh. The loop calls it before the
        term's first round; a caller that drives rounds itself (a test) once leading."""
        if self._term is not None:
            old = self.backend.writer
            self._fresh_state()
            old.close()  # its writes in flight are refused: not _acting() any more
            emit(log, logging.INFO, "rejoined", identity=self.config.identity, term=term)
        self._term = term

    def _leading_changed(self, leading: bool) -> None:
        self.metrics.set_leader(leading)
        self.wake.set()  # a new leader's first round runs now, not at the next change

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
            if name == "lease":
                self._lease_thread = t

    def run(self) -> int:
        """Run until stopped, through lost and won-back leases; the writes are flushed
        and a Lease still held is released before returning 0."""
        self._serve_metrics()
        self.start_threads()
        fields = {"identity": self.config.identity, "policy": self.config.policy}
        emit(log, logging.INFO, "started", **fields, placement=self.config.placement)
        try:
            code = self._loop()
        finally:
            self._shutdown()
        return code

    def _serve_metrics(self) -> None:
        port = self.config.metrics_port
        if port is None:
            return
        try:
            self.metrics_server = self.metrics.serve(port)
        except OSError as exc:  # a port taken (two operators on one host) must not stop it
            emit(log, logging.ERROR, "metrics not served", port=port, error=one_line(exc))
            return
        port = self.metrics_server.server_port
        emit(log, logging.INFO, "serving metrics", port=port, path="/metrics")

    def _loop(self) -> int:
        last = 0.0
        while not self.stop_event.is_set():
            self.wake.wait(self._wait_s())
            if self.stop_event.is_set():
                break
            gap = self.config.min_gap_s - (time.monotonic() - last)
            if gap > 0:
                self.stop_event.wait(gap)
            self.wake.clear()
            term = self.elector.leading_term()
            if term is None or not self.caches.synced():
                continue
            if term != self._term:
                self.begin_term(term)
            last = time.monotonic()
            try:
                self.round()
            except API_ERRORS:
                self._retry_soon()  # KubeApi logged it
            except Exception:  # a bug: its traceback is wanted; the loop lives on
                log.exception("round failed")
                self._retry_soon()
        return 0

    def _retry_soon(self) -> None:
        self.stop_event.wait(self.config.min_gap_s)
        self.wake.set()

    def _wait_s(self) -> float:
        """How long the loop may sleep: `interval_s`, or less when the backend has a
        deadline (when leading: a standby's last plan is stale)."""
        wait_s = self.config.interval_s
        wake_s = self.backend.next_wake_s() if self._acting() else None
        if wake_s is not None:
            wait_s = min(wait_s, max(0.0, wake_s - self.backend.clock()))
        return wait_s

    def round(self) -> None:
        started = time.perf_counter()
        self._round_record = None
        self._reload_policy()
        self._publish_policy()
        self.backend.sync()
        self.backend.writer.flush()
        tree = self.quota_reader.read()
        self.controller.quotas = self.quota_reader.quotas
        plan = self.controller.decide(self.backend)
        self._write_quotas(tree, plan)
        if self.network is not None:
            self.network.publish(self.backend.last_snapshot, self.backend.records())
        if self.backend.cluster_changed:
            # Node indices moved: the policy's memory may name the old ones.
            self.controller.set_policy(self.controller.policy)
            self.backend.cluster_changed = False
        self.rounds += 1
        took_s = time.perf_counter() - started
        snapshot = self.backend.last_snapshot
        self.metrics.observe_round(took_s, snapshot, plan, self._round_record)
        self.metrics.count_defects(self.controller.defects)
        if log.isEnabledFor(logging.DEBUG):
            wake_s = self.backend.next_wake_s()
            emit(
                log,
                logging.DEBUG,
                "round",
                n=self.rounds,
                seconds=f"{took_s:.4f}",
                jobs=len(snapshot.jobs) if snapshot is not None else 0,
                running=len(plan.run),
                writes=self.backend.writer.writes,
                wake_in_s=f"{wake_s - self.backend.clock():.2f}" if wake_s is not None else "",
            )

    def _write_quotas(self, tree: QuotaTree | None, plan: Plan) -> None:
        snapshot = self.backend.last_snapshot
        reader = self.quota_reader
        if snapshot is None or not reader.objects or not self._acting():
            return
        if tree is not None:
            for view in reclaimed(snapshot, plan):
                leaf = tree.leaf_of(view.spec)
                self.reclaims.update(tree.chain(leaf) if leaf is not None else [])
        statuses = quota_statuses(tree, reader.invalid, snapshot, plan, self.reclaims)
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self.quota_writer.write(reader.objects, statuses, now)

    def _record_round(self, snapshot: Snapshot, plan: Plan) -> None:
        """Controller.on_round: the round's queue positions and preemptors, for the
        backend to write into the DLJobs' status as it applies the plan."""
        policy = self.controller.policy
        self._round_record = record_round(policy, snapshot, plan, plan.state)
        self.backend.round_record = self._round_record

    def _reload_policy(self) -> None:
        """Swap to the policy the ConfigMap names, with its options over --policy-opt's,
        if either changed: a new policy object from a fresh state; the jobs, their pods
        and the backend stay as they are. Options that do not parse or that the policy
        refuses keep the policy in effect, with a WARNING saying why."""
        try:
            choice = self.policy_watch.changed()
        except API_ERRORS:
            return  # KubeApi logged it; scheduling goes on with the current policy
        if choice is None:
            return
        name = choice.name
        try:
            scoped = parse_options(choice.options, self.policy_watch.name)
            options = self.config.options_for(name)
            options.update(options_for(scoped, name))
            if (name, options) == self._policy_in_effect:
                return
            policy = make_policy(name, **options)
        except (UnknownPolicyError, ValueError) as exc:  # a name or options refused
            emit(log, logging.WARNING, "policy not switched", policy=name, error=one_line(exc))
            return
        old = self.controller.policy.name
        self.controller.set_policy(policy)
        self._policy_in_effect = (name, options)
        emit(log, logging.INFO, "policy switched", old=old, new=policy.name, options=options)

    def _publish_policy(self) -> None:
        """Say in the policy ConfigMap which policy this replica runs and with which
        options (operators/policy_config.publish_running), at its term's first round and
        after each switch, so that the API shows them before any admin chose one. A
        write refused is tried again at the next round; scheduling goes on meanwhile."""
        if self._published == self._policy_in_effect or not self._acting():
            return
        name, options = self._policy_in_effect
        watch = self.policy_watch
        try:
            publish_running(self.api, watch.namespace, RunningPolicy(name, options), watch.name)
        except (*API_ERRORS, RuntimeError) as exc:
            emit(log, logging.WARNING, "policy not published", policy=name, error=one_line(exc))
            return
        self._published = self._policy_in_effect

    def stop(self) -> None:
        """Ask `run()` to stop (safe from a signal handler: it only sets events)."""
        self.stop_event.set()
        self.wake.set()

    def _shutdown(self) -> None:
        self.stop_event.set()
        if self._lease_thread is not None:
            self._lease_thread.join(STOP_JOIN_S)  # no renewal may follow the release
        self.backend.writer.close()
        with contextlib.suppress(*API_ERRORS):  # KubeApi logged it; the Lease expires
            self.elector.release()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        emit(log, logging.INFO, "stopped", identity=self.config.identity, rounds=self.rounds)
