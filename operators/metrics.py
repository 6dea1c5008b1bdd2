"""The operator's Prometheus metrics, on a registry of their own.

`Operator` (operators/operator.py) owns one `OperatorMetrics`: it times each round
and sets the gauges from the round's snapshot, plan and record (queue length and the
longest wait by tenant, GPUs by state; the waits of the jobs it starts and the quota
reclaims' latency), and counts the plan defects the controller's check held back
(controller.checks); the writer counts each decision from the Events it emits
(preemptions, restarts and failures by reason); `KubeApi` counts error responses;
the leader elector says whether this replica leads.

The names are a contract with the Grafana dashboard the Helm chart ships
(helm/gpuflow/dashboards/gpuflow.json, checked by tests/helm/test_dashboard.py) and
with operators' alert rules: rename none; add new ones.
`serve(port)` exposes them on `/metrics` (prometheus_client's own HTTP server). The
registry is never the process-global one, so that two operators in one process
(tests, a standby) keep their numbers apart.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from controller.checks import PlanDefects
from controller.decisions import RoundRecord
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
    {
        "BackoffLimitExceeded",
        "PodFailurePolicy",
        "InvalidSpec",
        "InvalidPodTemplate",
        "Unschedulable",
    }
)
WAITING_REASON = "Waiting"  # a waiting job the plan gave no reason for
# Decisions that take GPUs from a running job for another's sake or an admin's drain
# (each is a restart too, RESTART_REASONS, but for NodeDrained).
PREEMPTION_REASONS = frozenset(
    {"PreemptedByPolicy", "PreemptedForReclaim", "SuspendedByPolicy", "NodeDrained"}
)
# Queue waits and reclaim latencies: from a round's interval (5 s) to days of a
# starved job; Prometheus' default buckets stop at 10 s.
WAIT_BUCKETS_S = (5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0,
                  86400.0, 7 * 86400.0)  # fmt: skip
GPU_STATES = ("allocated", "free", "cordoned", "down")


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
        self.waiting_jobs = Gauge(
            "gpuflow_operator_waiting_jobs",
            "Jobs waiting after the last round, by tenant",
            ["tenant"],
            registry=r,
        )
        self.oldest_wait = Gauge(
            "gpuflow_operator_oldest_wait_seconds",
            "How long each tenant's longest-waiting job has waited, after the last round",
            ["tenant"],
            registry=r,
        )
        self.wait_seconds = Histogram(
            "gpuflow_operator_wait_seconds",
            "Time a job waited in the queue until a round started it, by tenant",
            ["tenant"],
            buckets=WAIT_BUCKETS_S,
            registry=r,
        )
        self.preemptions = Counter(
            "gpuflow_operator_preemptions",
            "Running jobs stopped for another job, a quota reclaim or a drain, by reason",
            ["reason"],
            registry=r,
        )
        self.gpus = Gauge(
            "gpuflow_operator_gpus",
            "GPUs by state after the last round: allocated (held by running jobs), free,"
            " cordoned (free on cordoned or draining nodes), down",
            ["state"],
            registry=r,
        )
        self.plan_defects = Counter(
            "gpuflow_operator_plan_defects",
            "Jobs a policy's plan gave GPUs the GPU-choice filter refuses (a cordoned node,"
            " a GPU model, CPU or memory, a quota), held back by the controller's check;"
            " by policy and reason",
            ["policy", "reason"],
            registry=r,
        )
        self.reclaim_seconds = Histogram(
            "gpuflow_operator_reclaim_seconds",
            "Quota reclaim latency: for each job a reclaim made room for, the time from"
            " when it began waiting to the round that reclaimed GPUs for it",
            buckets=WAIT_BUCKETS_S,
            registry=r,
        )
        self._reasons: set[str] = set()
        self._tenants: set[str] = set()
        self._lock = threading.Lock()

    # -- called by the operator, the writer, KubeApi ----------------------------------------

    def observe_round(
        self,
        seconds: float,
        snapshot: Snapshot | None,
        plan: Plan,
        record: RoundRecord | None = None,
    ) -> None:
        """A round's latency, and the gauges from what it saw and decided; `record`
        (the round's displacements, None when the policy did not decide) gives the
        reclaims' latency."""
        self.round_seconds.observe(seconds)
        waiting: dict[str, int] = {}
        tenants: dict[str, int] = {}
        earliest: dict[str, float] = {}  # tenant -> its longest waiter's waiting_since_s
        now = snapshot.now_s if snapshot is not None else 0.0
        if snapshot is not None:
            for job in snapshot.waiting():
                tenant = job.spec.tenant
                since = job.waiting_since_s
                if job.job_id in plan.run:  # started by this round
                    self.wait_seconds.labels(tenant=tenant).observe(max(0.0, now - since))
                    continue
                reason = plan.reason_for(job.job_id)
                code = reason.code if reason is not None else WAITING_REASON
                waiting[code] = waiting.get(code, 0) + 1
                tenants[tenant] = tenants.get(tenant, 0) + 1
                if since < earliest.get(tenant, now):
                    earliest[tenant] = since
            self.gpus_total.set(snapshot.cluster.num_gpus)
            self._observe_reclaims(snapshot, record)
        with self._lock:
            # A reason or tenant no job waits for any more reads 0, not its last value.
            self._reasons.update(waiting)
            for code in self._reasons:
                self.pending_jobs.labels(reason=code).set(waiting.get(code, 0))
            self._tenants.update(tenants)
            for tenant in self._tenants:
                self.waiting_jobs.labels(tenant=tenant).set(tenants.get(tenant, 0))
                self.oldest_wait.labels(tenant=tenant).set(now - earliest.get(tenant, now))
        self.queue_length.set(sum(waiting.values()))
        self.running_jobs.set(len(plan.run))
        held = {(s.node, s.gpu) for alloc in plan.run.values() for s in alloc.shares}
        self.gpus_allocated.set(len(held))
        if snapshot is not None:
            for state, count in gpus_by_state(snapshot, held).items():
                self.gpus.labels(state=state).set(count)

    def _observe_reclaims(self, snapshot: Snapshot, record: RoundRecord | None) -> None:
        """Each waiting job a quota reclaim gave GPUs to this round: how long it had
        waited (controller.decisions' displacements name who took whose GPUs)."""
        if record is None:
            return
        helped: set[str] = set()
        for moved in record.displaced.values():
            if moved.reason is not None and "reclaim" in moved.reason.code.lower():
                helped.update(moved.by)
        for job_id in sorted(helped):
            job = snapshot.job(job_id)
            if job is not None and not job.running:
                self.reclaim_seconds.observe(max(0.0, snapshot.now_s - job.waiting_since_s))

    def decision(self, action: str, reason: str) -> None:
        self.decisions.labels(action=action, reason=reason).inc()
        if reason in PREEMPTION_REASONS:
            self.preemptions.labels(reason=reason).inc()
        if reason in RESTART_REASONS:
            self.restarts.labels(reason=reason).inc()
        elif reason in FAILURE_REASONS:
            self.failures.labels(reason=reason).inc()

    def api_error(self, verb: str, resource: str, code: str) -> None:
        self.api_errors.labels(verb=verb, resource=resource, code=code).inc()

    def count_defects(self, defects: PlanDefects) -> None:
        """Count the plan defects the controller held back since the last call."""
        for policy, code in defects.drain():
            self.plan_defects.labels(policy=policy, reason=code).inc()

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    # -- exposition ---------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "0.0.0.0") -> WSGIServer:
        """Serve /metrics on `port` in a daemon thread; returns the server (its
        `server_port` is the port bound, when `port` is 0)."""
        server, _thread = start_http_server(port, addr, registry=self.registry)
        return server


def gpus_by_state(snapshot: Snapshot, held: set[tuple[int, int]]) -> dict[str, int]:
    """The cluster's GPUs by state: `held` (node, gpu) pairs are allocated; the others
    are down on a down node, cordoned on a cordoned or draining one, else free. Only
    the down and cordoned nodes are visited one by one (a round at 8,000 GPUs must not
    pay per GPU: bench/round_metrics.py)."""
    nodes = snapshot.cluster.nodes
    down = snapshot.down_nodes
    cordoned = snapshot.cordoned_nodes - down
    special = down | cordoned
    on_special = Tally(node for node, _ in held if node in special) if special else Tally()
    down_gpus = sum(nodes[i].num_gpus for i in down)
    idle_cordoned = sum(nodes[i].num_gpus - on_special[i] for i in cordoned)
    allocated = len(held) - sum(on_special[i] for i in down)
    free = snapshot.cluster.num_gpus - allocated - idle_cordoned - down_gpus
    return {"allocated": allocated, "free": free, "cordoned": idle_cordoned, "down": down_gpus}
