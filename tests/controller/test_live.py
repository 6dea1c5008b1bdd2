"""Local mode's backend: jobs submitted at scaled wall-clock time run and finish."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.live import LiveCluster
from controller.maintenance import NodeAction
from controller.model import GpuType, JobStatus
from controller.placement import ConsolidatedPlacer
from controller.quotas.admission import Quotas
from controller.quotas.spec import quotas_from_data
from controller.rates import RateModel
from controller.spec.yaml_spec import load_yaml
from policies.registry import make_policy
from tests.builders import make_cluster, make_job, make_typed_cluster

ROOT = Path(__file__).resolve().parents[2]


class ManualClock:
    """Wall time the test moves by hand (an injected clock, not a stand-in service)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _live(clock: ManualClock, scale: float = 10.0) -> LiveCluster:
    cluster = make_cluster(nodes=1, gpus=4)
    return LiveCluster(
        cluster,
        make_policy("fifo"),
        ConsolidatedPlacer(cluster),
        time_scale=scale,
        round_interval_s=0.0,
        clock=clock,
    )


def test_a_submitted_job_runs_and_finishes_on_scaled_time() -> None:
    clock = ManualClock()
    live = _live(clock)
    clock.t += 1.0  # 10 simulated seconds
    spec = live.add_job(make_job("a", 4, duration_s=100))
    assert spec.submit_s == pytest.approx(10.0)
    state = live.job("a")
    assert state is not None and state.status is JobStatus.RUNNING
    clock.t += 5.0  # 50 s later: half done
    state = live.job("a")
    assert state is not None and state.progress == pytest.approx(0.5)
    clock.t += 6.0
    state = live.job("a")
    assert state is not None and state.status is JobStatus.SUCCEEDED
    assert state.finish_s == pytest.approx(110.0)


def test_a_queued_job_says_why_and_can_be_cancelled() -> None:
    clock = ManualClock()
    live = _live(clock)
    live.add_job(make_job("a", 4, duration_s=100))
    live.add_job(make_job("b", 2, duration_s=100))
    waiting = live.job("b")
    assert waiting is not None and waiting.status is JobStatus.QUEUED
    assert waiting.reason is not None and waiting.reason.code == "InsufficientGpus"
    assert live.cancel("b") is True
    gone = live.job("b")
    assert gone is not None and gone.status is JobStatus.CANCELLED
    assert live.cancel("b") is False
    assert [s.job_id for s in live.jobs()] == ["a", "b"]


def test_switching_policy_takes_effect_at_the_next_round() -> None:
    clock = ManualClock()
    live = _live(clock)
    live.set_policy(make_policy("srtf"))
    assert live.policy_name == "srtf"
    live.add_job(make_job("long", 4, duration_s=1000))
    clock.t += 1.0
    live.add_job(make_job("short", 4, duration_s=10))
    short = live.job("short")
    assert short is not None and short.status is JobStatus.RUNNING  # SRTF preempted "long"


def test_add_jobs_places_a_batch_at_one_instant_and_refuses_used_ids() -> None:
    clock = ManualClock()
    live = _live(clock)
    clock.t += 2.0
    placed = live.add_jobs([make_job("a", 2, duration_s=100), make_job("b", 2, duration_s=100)])
    assert [p.submit_s for p in placed] == [pytest.approx(20.0)] * 2
    with pytest.raises(ValueError, match="already used"):
        live.add_jobs([make_job("c", 1, duration_s=10), make_job("a", 1, duration_s=10)])
    assert [s.job_id for s in live.jobs()] == ["a", "b"]  # all or nothing: no "c"


def test_active_only_poll_and_done_counts_skip_the_finished_history() -> None:
    clock = ManualClock()
    live = _live(clock)
    live.add_job(make_job("short", 4, duration_s=10))
    live.add_job(make_job("long", 4, duration_s=1000))
    live.add_job(make_job("gone", 4, duration_s=1000))
    assert live.cancel("gone")
    clock.t += 2.0  # "short" finished, "long" runs
    assert [s.job_id for s in live.jobs(active_only=True)] == ["long"]
    assert {s.job_id for s in live.jobs()} == {"short", "long", "gone"}
    assert live.done_counts() == {JobStatus.SUCCEEDED: 1, JobStatus.CANCELLED: 1}
    states, cursor = live.poll()
    assert {s.job_id: s.status for s in states} == {
        "long": JobStatus.RUNNING,
        "short": JobStatus.SUCCEEDED,
        "gone": JobStatus.CANCELLED,
    }
    again, cursor2 = live.poll(cursor)
    assert [s.job_id for s in again] == ["long"] and cursor2 == cursor  # finished: once
    skipped, _ = live.poll(cursor, wanted=lambda job_id, status, restarts, reason: False)
    assert skipped == []


def test_new_quotas_take_effect_at_the_next_round_without_another_event() -> None:
    clock = ManualClock()
    live = _live(clock)
    # A tree no queue of which is the tenant's: its job waits with NoQueue.
    live.set_quotas(Quotas(quotas_from_data([{"name": "team-a", "guarantee": 4}])))
    live.add_job(make_job("b", 2, duration_s=100, tenant="team-b"))
    waiting = live.job("b")
    assert waiting is not None and waiting.status is JobStatus.QUEUED
    assert waiting.reason is not None and waiting.reason.code == "NoQueue"
    # The tenant gets a queue: the job starts with nothing else happening.
    tree = [{"name": "team-a", "guarantee": 2}, {"name": "team-b", "guarantee": 2}]
    live.set_quotas(Quotas(quotas_from_data(tree)))
    started = live.job("b")
    assert started is not None and started.status is JobStatus.RUNNING


def test_each_job_keeps_its_simulated_speed_on_each_gpu_type_it_ran_on() -> None:
    """On Gavel's three-type cluster (2 V100, 4 P100, 6 K80 servers of 4), gavel-fifo
    puts the first 4-GPU job on the V100s, its fastest type; a second fills the other
    V100 server and a third goes to the next type. Each job's record names the type
    it runs on at the rate model's speed on its GPUs there."""
    clock = ManualClock()
    cluster = load_yaml(ROOT / "examples" / "clusters" / "gavel-8-16-24.yaml")
    live = LiveCluster(
        cluster,
        make_policy("gavel-fifo", round_s=1.0, reset_interval_s=0.0),
        ConsolidatedPlacer(cluster),
        time_scale=1.0,
        round_interval_s=0.0,
        clock=clock,
    )
    specs = live.add_jobs([make_job(f"j{i}", 4, duration_s=10_000.0) for i in range(3)])
    clock.t += 2.0
    rates = RateModel(cluster)
    types = {}
    for spec in specs:
        state = live.job(spec.job_id)
        assert state is not None and state.allocation is not None
        (node,) = state.allocation.nodes
        gpu = cluster.nodes[node].gpu_type.name
        (record,) = live.type_throughput(spec.job_id)
        assert (record.gpu_type, record.gpus, record.batch_size) == (gpu, 4, spec.batch_size)
        assert record.steps_per_s == rates.rate_ips(spec, state.allocation)
        types[spec.job_id] = gpu
    assert types["j0"] == types["j1"] == "V100-SXM2-16GB" != types["j2"]
    assert live.type_throughput("nobody") == []


@pytest.mark.parametrize("policy", ["fifo", "srtf"])
def test_fifo_and_srtf_start_a_job_on_the_fastest_type_with_no_matrix(policy: str) -> None:
    """A server of a slow type listed before one of a fast type and no throughput
    matrix: the catalogue's speeds through the performance model send the first job to
    the fast server and the second, which finds it full, to the slow one (issue 31,
    item 4; a placer blind to types takes server 0 first)."""
    slow = GpuType("SLOW-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=0.5)
    fast = GpuType("FAST-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0, speed=2.0)
    cluster = make_typed_cluster((slow, 1), (fast, 1))
    clock = ManualClock()
    live = LiveCluster(
        cluster,
        make_policy(policy),
        ConsolidatedPlacer(cluster),
        time_scale=1.0,
        round_interval_s=0.0,
        clock=clock,
    )
    live.add_job(make_job("a", 4, duration_s=1000.0))
    clock.t += 1.0
    live.add_job(make_job("b", 4, duration_s=1000.0))
    clock.t += 1.0
    placed = {}
    for job_id in ("a", "b"):
        state = live.job(job_id)
        assert state is not None and state.allocation is not None
        placed[job_id] = state.allocation.nodes
    assert placed == {"a": (1,), "b": (0,)}


def test_occupancy_keeps_its_version_until_the_gpus_change_hands() -> None:
    clock = ManualClock()
    live = _live(clock)
    empty = live.occupancy()
    assert empty.running == () and empty.waiting == 0
    live.add_job(make_job("a", 2, duration_s=100))
    clock.t += 0.5
    live.add_job(make_job("b", 2, duration_s=100))
    live.add_job(make_job("c", 4, duration_s=100))
    first = live.occupancy()
    assert [r.job_id for r in first.running] == ["a", "b"]  # by submit time
    assert first.waiting == 1 and first.version > empty.version
    held = sorted((s.node, s.gpu) for r in first.running for s in r.allocation)
    assert held == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert all(r.busy_gpus > 0 for r in first.running)
    clock.t += 1.0  # progress moves; who holds what does not
    again = live.occupancy()
    assert again.version == first.version and again.running == first.running
    live.maintain("n0", NodeAction.CORDON, "root")
    cordoned = live.occupancy()
    assert cordoned.cordoned == frozenset({0}) and cordoned.version == first.version + 1
    clock.t += 10.0  # a and b finish; c waits on the cordoned node
    done = live.occupancy()
    assert done.running == () and done.waiting == 1 and done.version == cordoned.version + 1
