"""The operator's scheduling metrics from one round (operators.metrics.OperatorMetrics,
pure: no server): queue length and the longest wait by tenant, the waits of the jobs
a round starts, GPUs by state, the latency of a quota reclaim, preemptions by reason.
The names are the Grafana dashboard's (tests/helm/test_dashboard.py)."""

from __future__ import annotations

from controller.checks import PlanDefects
from controller.decisions import Displacement, RoundRecord
from controller.model import Action, Allocation, JobStatus, Plan, Reason, Snapshot
from controller.placement import ConsolidatedPlacer
from operators.metrics import OperatorMetrics
from tests.builders import make_cluster, make_job, make_view

NOW = 1000.0


def a_round() -> tuple[Snapshot, Plan, RoundRecord]:
    """3 nodes x 4 GPUs, node 1 cordoned, node 2 down. `r1` (tenant a) runs on node 0's
    GPUs 0-1; `w1` (a, waited 100 s) and `w3` (b, 300 s) wait on; `w2` (b, 50 s) starts
    on GPU 2, the GPUs a reclaim took from `gone` (a, running before)."""
    cluster = make_cluster(nodes=3, gpus=4)
    held = Allocation.whole([(0, 0), (0, 1)])
    jobs = (
        make_view(make_job("r1", 2, tenant="a"), status=JobStatus.RUNNING, allocation=held),
        make_view(
            make_job("gone", 1, tenant="a"),
            status=JobStatus.RUNNING,
            allocation=Allocation.whole([(0, 2)]),
        ),
        make_view(make_job("w1", 4, tenant="a"), waiting_since_s=NOW - 100),
        make_view(make_job("w2", 1, tenant="b"), waiting_since_s=NOW - 50),
        make_view(make_job("w3", 4, tenant="b"), waiting_since_s=NOW - 300),
    )
    snapshot = Snapshot(
        NOW, cluster, jobs, ConsolidatedPlacer(cluster),
        down_nodes=frozenset({2}), cordoned_nodes=frozenset({1}),
    )  # fmt: skip
    reclaim = Reason("PreemptedForReclaim", "queue b under its guarantee")
    plan = Plan(
        run={"r1": held, "w2": Allocation.whole([(0, 2)])},
        reasons={"gone": reclaim},
        default_reason=Reason("InsufficientGpus", "no 4 GPUs free"),
    )
    moved = Displacement("gone", Action.PREEMPT, ("w2",), reclaim, NOW)
    return snapshot, plan, RoundRecord(NOW, {}, {"gone": moved})


def _value(m: OperatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_a_round_sets_waits_by_tenant_gpus_by_state_and_reclaim_latency() -> None:
    m = OperatorMetrics()
    snapshot, plan, record = a_round()
    m.observe_round(0.01, snapshot, plan, record)
    assert _value(m, "gpuflow_operator_waiting_jobs", tenant="a") == 1
    assert _value(m, "gpuflow_operator_waiting_jobs", tenant="b") == 1  # w2 started
    assert _value(m, "gpuflow_operator_oldest_wait_seconds", tenant="a") == 100
    assert _value(m, "gpuflow_operator_oldest_wait_seconds", tenant="b") == 300
    assert _value(m, "gpuflow_operator_wait_seconds_count", tenant="b") == 1
    assert _value(m, "gpuflow_operator_wait_seconds_sum", tenant="b") == 50
    assert _value(m, "gpuflow_operator_wait_seconds_count", tenant="a") is None
    gpus = {s: _value(m, "gpuflow_operator_gpus", state=s) for s in ("allocated", "free",
            "cordoned", "down")}  # fmt: skip
    assert gpus == {"allocated": 3, "free": 1, "cordoned": 4, "down": 4}
    assert _value(m, "gpuflow_operator_reclaim_seconds_count") == 1
    assert _value(m, "gpuflow_operator_reclaim_seconds_sum") == 50
    assert _value(m, "gpuflow_operator_queue_length") == 2

    # The next round: nothing of tenant b waits any more; its gauges read 0, and a
    # round the policy did not decide (no record) reclaims nothing.
    rest = Snapshot(NOW + 5, snapshot.cluster, snapshot.jobs[:3], snapshot.placer)
    m.observe_round(0.01, rest, Plan(run={"r1": plan.run["r1"]}), None)
    assert _value(m, "gpuflow_operator_waiting_jobs", tenant="b") == 0
    assert _value(m, "gpuflow_operator_oldest_wait_seconds", tenant="b") == 0
    assert _value(m, "gpuflow_operator_oldest_wait_seconds", tenant="a") == 105
    assert _value(m, "gpuflow_operator_reclaim_seconds_count") == 1


def test_plan_defects_count_by_policy_and_reason_once_each() -> None:
    m = OperatorMetrics()
    defects = PlanDefects()
    defects.add("optimus", "NodeCordoned")
    defects.add("optimus", "NodeCordoned")
    defects.add("pollux", "QueueOverShare")
    m.count_defects(defects)
    m.count_defects(defects)  # nothing new since
    name = "gpuflow_operator_plan_defects_total"
    assert _value(m, name, policy="optimus", reason="NodeCordoned") == 2
    assert _value(m, name, policy="pollux", reason="QueueOverShare") == 1
    assert defects.total == 3 and defects.by_policy == {"optimus": 2, "pollux": 1}


def test_preemptions_count_by_reason_and_other_decisions_do_not() -> None:
    m = OperatorMetrics()
    for action, reason in [
        ("preempt", "PreemptedForReclaim"),
        ("preempt", "PreemptedByPolicy"),
        ("preempt", "PreemptedByPolicy"),
        ("start", "Scheduled"),
        ("restart", "WorkerFailed"),
    ]:
        m.decision(action, reason)
    name = "gpuflow_operator_preemptions_total"
    assert _value(m, name, reason="PreemptedByPolicy") == 2
    assert _value(m, name, reason="PreemptedForReclaim") == 1
    assert _value(m, name, reason="Scheduled") is None
    assert _value(m, name, reason="WorkerFailed") is None
    assert _value(m, "gpuflow_operator_job_restarts_total", reason="WorkerFailed") == 1
