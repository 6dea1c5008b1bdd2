"""The operator's Prometheus metrics, on a registry of their own.

`Operator` (operators/operator.py) owns one `OperatorMetrics`: it times each round
and sets the gauges from the round's snapshot and plan; the writer counts each
decision from the Events it emits (restarts and failures by reason); `KubeApi`
counts error responses; the leader elector says whether this replica leads.
`serve(port)` exposes them on `/metrics` (prometheus_client's own HTTP server). The
registry is never the process-global one, so that two operators in one process
(tests, a standby) keep their numbers apart.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from controller.model import Plan, Snapshot

# Rounds take ~1 ms with a few jobs and ~100 ms with thousands (bench/operator.py);
# the buckets span that and the slow tail of a round that waits on its writes.
ROUND_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Event reasons (operators/lifecycle.py, operators/backend.py) by what they mean for
# the job: it starts over (from its checkpoint), or it is given up.
RESTART_REASONS = frozenset(
    {
        "WorkerFailed",
        "WorkerCheckpointed",
        "WorkerFailureIgnored",
        "NodeLost",
        "GangBroken",
        "StartTimeout",
        "PreemptedByPolicy",
        "PreemptedForReclaim",
        "SuspendedByPolicy",
        "ResizedByPolicy",
        "MigratedByPolicy",
    }
)
FAILURE_REASONS = frozenset(
    {"BackoffLimitExceeded", "PodFailurePolicy", "InvalidSpec", "Unschedulable"}
)
WAITING_REASON = "Waiting"  # a waiting job the plan gave no reason for


class OperatorMetrics:
    """Every metric the operator exports, on `self.registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.round_seconds = Histogram(
            "gpuflow_operator_round_seconds",
            "Scheduling round latency: sync, observe, policy, apply and its writes",
            buckets=ROUND_BUCKETS_S,
            registry=r,
        )
        self.queue_length = Gauge(
            "gpuflow_operator_queue_length", "Jobs waiting after the last round", registry=r
        )
        self.pending_jobs = Gauge(
            "gpuflow_operator_pending_jobs",
            "Jobs waiting after the last round, by why-pending reason",
            ["reason"],
            registry=r,
        )
        self.running_jobs = Gauge(
            "gpuflow_operator_running_jobs", "Jobs the last plan runs", registry=r
        )
        self.gpus_allocated = Gauge(
            "gpuflow_operator_gpus_allocated",
            "GPUs held by the jobs the last plan runs (a shared GPU counts once)",
            registry=r,
        )
        self.gpus_total = Gauge(
            "gpuflow_operator_gpus_total", "GPUs of the cluster's nodes", registry=r
        )
        self.decisions = Counter(
            "gpuflow_operator_decisions",
            "Decisions carried out (Events emitted), by action and reason",
            ["action", "reason"],
            registry=r,
        )
        self.restarts = Counter(
            "gpuflow_operator_job_restarts",
            "Jobs torn down to start over from their checkpoint, by reason",
            ["reason"],
            registry=r,
        )
        self.failures = Counter(
            "gpuflow_operator_job_failures", "Jobs given up, by reason", ["reason"], registry=r
        )
        self.api_errors = Counter(
            "gpuflow_operator_api_errors",
            "Kubernetes API error responses (code none: no answer), by verb, resource, code",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.leader = Gauge(
            "gpuflow_operator_leader", "1 while this replica holds the Lease", registry=r
        )
        self._reasons: set[str] = set()
        self._lock = threading.Lock()

    # -- called by the operator, the writer, KubeApi ----------------------------------------

    def observe_round(self, seconds: float, snapshot: Snapshot | None, plan: Plan) -> None:
        """A round's latency, and the gauges from what it saw and decided."""
        self.round_seconds.observe(seconds)
        waiting: dict[str, int] = {}
        if snapshot is not None:
            for job in snapshot.waiting():
                if job.job_id in plan.run:
                    continue
                reason = plan.reason_for(job.job_id)
                code = reason.code if reason is not None else WAITING_REASON
                waiting[code] = waiting.get(code, 0) + 1
            self.gpus_total.set(snapshot.cluster.num_gpus)
        with self._lock:
            # A reason no job waits for any more reads 0, not its last value.
            self._reasons.update(waiting)
            for code in self._reasons:
                self.pending_jobs.labels(reason=code).set(waiting.get(code, 0))
        self.queue_length.set(sum(waiting.values()))
        self.running_jobs.set(len(plan.run))
        held = {(s.node, s.gpu) for alloc in plan.run.values() for s in alloc.shares}
        self.gpus_allocated.set(len(held))

    def decision(self, action: str, reason: str) -> None:
        self.decisions.labels(action=action, reason=reason).inc()
        if reason in RESTART_REASONS:
            self.restarts.labels(reason=reason).inc()
        elif reason in FAILURE_REASONS:
            self.failures.labels(reason=reason).inc()

    def api_error(self, verb: str, resource: str, code: str) -> None:
        self.api_errors.labels(verb=verb, resource=resource, code=code).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    # -- exposition ---------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:
        """Serve /metrics on `port` in a daemon thread; returns the server (its
        `server_port` is the port bound, when `port` is 0)."""
        server, _thread = start_http_server(port, addr, registry=self.registry)
        return server
