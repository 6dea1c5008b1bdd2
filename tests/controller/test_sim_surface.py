"""The simulator's public surface, what local mode (controller.live) reads."""

from __future__ import annotations

import pytest

from controller.maintenance import NodeAction
from controller.model import JobStatus
from controller.placement import ConsolidatedPlacer
from controller.sim import NodeEvent, ResumedJob, SimConfig, Simulator
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def _sim(
    nodes: int = 1, *, interval_s: float = 0.0, failures: tuple[NodeEvent, ...] = ()
) -> Simulator:
    cluster = make_cluster(nodes=nodes, gpus=4)
    config = SimConfig(round_interval_s=interval_s, failures=failures)
    return Simulator(cluster, [], make_policy("fifo"), ConsolidatedPlacer(cluster), config)


def test_running_usage_counts_no_busy_gpus_while_a_restart_is_paid() -> None:
    sim = _sim()
    sim.add_arrival(make_job("a", 2, duration_s=10_000))
    sim.advance(0.0)
    (first,) = sim.running_usage()
    assert first.job_id == "a" and first.allocation.num_gpus == 2
    assert first.busy_gpus > 0.0  # a first start pays no overhead
    assert first.inter_node_gbps is None  # dedicated links
    sim.advance(10.0)
    assert sim.maintain(0, NodeAction.DRAIN, "ops") == ["a"]
    sim.advance(20.0)
    assert sim.running_usage() == []
    assert sim.waiting_gpus() == [2]
    sim.maintain(0, NodeAction.UNCORDON, "ops")
    sim.advance(20.0)
    (restarted,) = sim.running_usage()
    assert restarted.busy_gpus == 0.0  # restored from its checkpoint, not yet busy
    (view,) = sim.views()
    sim.advance(view.resume_s + 1.0)
    (busy,) = sim.running_usage()
    assert busy.busy_gpus == pytest.approx(first.busy_gpus)


def test_waiting_gpus_free_gpus_and_the_gpus_no_waiting_job_can_use() -> None:
    sim = _sim()
    sim.add_arrival(make_job("a", 3, duration_s=1000))
    sim.add_arrival(make_job("b", 2, duration_s=1000))
    sim.advance(0.0)
    assert [u.job_id for u in sim.running_usage()] == ["a"]
    assert sim.waiting_gpus() == [2]
    assert sim.free_gpus == 1
    assert sim.unallocatable_gpus(sim.waiting_gpus()) == 1
    assert sim.unallocatable_gpus([1]) == 0
    assert sim.reason_for("b") is not None and sim.reason_for("a") is None


def test_id_used_covers_the_trace_submitted_and_resumed_jobs() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    sim = Simulator(
        cluster, [make_job("t", 1, submit_s=50.0)], make_policy("fifo"), ConsolidatedPlacer(cluster)
    )
    sim.add_arrival(make_job("s", 1, submit_s=10.0))
    sim.resume(ResumedJob(spec=make_job("r", 1)))
    assert [sim.id_used(i) for i in ("t", "s", "r", "x")] == [True, True, True, False]
    with pytest.raises(ValueError, match="id already used"):
        sim.add_arrival(make_job("t", 1, submit_s=60.0))


def test_set_policy_switches_and_brings_a_round_at_the_next_boundary() -> None:
    sim = _sim(interval_s=60.0)
    sim.add_arrival(make_job("a", 1, duration_s=10_000))
    sim.advance(30.0)
    rounds = sim.rounds
    sim.advance(90.0)
    assert sim.rounds == rounds  # nothing changed, no round
    sim.set_policy(make_policy("srtf"))
    sim.advance(119.0)
    assert sim.rounds == rounds
    sim.advance(120.0)
    assert sim.rounds == rounds + 1 and sim.policy.name == "srtf"
    assert sim.now_s == 120.0


def test_views_picks_jobs_before_building_them() -> None:
    sim = _sim()
    sim.add_arrival(make_job("a", 4, duration_s=1000))
    sim.add_arrival(make_job("b", 4, duration_s=1000))
    sim.advance(100.0)
    seen: list[tuple[str, JobStatus, int]] = []

    def waiting(job_id: str, status: JobStatus, restarts: int) -> bool:
        seen.append((job_id, status, restarts))
        return status is not JobStatus.RUNNING

    assert [v.job_id for v in sim.views(waiting)] == ["b"]
    assert seen == [("a", JobStatus.RUNNING, 0), ("b", JobStatus.QUEUED, 0)]
    (a,) = [v for v in sim.views() if v.job_id == "a"]
    assert a.mark_s == 100.0  # advanced to now


def test_node_states_and_outcomes_read_from_outside() -> None:
    sim = _sim(nodes=2, failures=(NodeEvent(5.0, "n1", up=False),))
    sim.add_arrival(make_job("a", 1, duration_s=10.0))
    sim.advance(1.0)
    sim.maintain(0, NodeAction.CORDON, "ops")
    sim.advance(100.0)
    assert sim.down_nodes == frozenset({1}) and sim.cordoned_nodes == frozenset({0})
    (done,) = sim.outcomes
    assert done.job_id == "a" and done.finish_s is not None
    assert sim.cancel("a") is False
