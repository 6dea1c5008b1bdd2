"""What if: the live cluster's state replayed from now under each policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.live import LiveCluster
from controller.maintenance import NodeAction
from controller.model import Allocation, JobStatus
from controller.placement import ConsolidatedPlacer
from controller.sim import ResumedJob, SimConfig, Simulator
from controller.whatif import Limits, LiveState, WhatIfTooLarge, forecast
from policies.registry import UnknownPolicyError, make_policy, policy_names
from tests.builders import make_cluster, make_job


class ManualClock:
    """Wall time the test moves by hand (an injected clock)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _four_gpus(*, at_s: float = 1000.0) -> LiveState:
    """One 4-GPU node: `long` runs (half done), `big` (1000 s) and then `short` (50 s)
    wait for all four GPUs. Live time: `at_s`."""
    cluster = make_cluster(nodes=1, gpus=4)
    running = ResumedJob(
        spec=make_job("long", 4, submit_s=at_s - 600, duration_s=1000),
        status=JobStatus.RUNNING,
        done_fraction=0.5,
        attained_gpu_s=4 * 500.0,
        executed_s=500.0,
        first_start_s=at_s - 500,
        allocation=Allocation.whole((0, g) for g in range(4)),
    )
    big = ResumedJob(spec=make_job("big", 4, submit_s=at_s - 300, duration_s=1000))
    short = ResumedJob(spec=make_job("short", 4, submit_s=at_s - 200, duration_s=50))
    return LiveState(now_s=at_s, cluster=cluster, jobs=(running, big, short), round_interval_s=0)


def test_srtf_finishes_the_short_waiting_job_before_fifo_does() -> None:
    out = forecast(_four_gpus(), ["fifo", "srtf"])
    fifo, srtf = out["fifo"].finish_s, out["srtf"].finish_s
    # FIFO: `long` ends in 500 s, then `big` (1000 s), then `short`.
    assert fifo["long"] == pytest.approx(500.0, rel=0.02)
    assert fifo["big"] == pytest.approx(1500.0, rel=0.02)
    assert fifo["short"] == pytest.approx(1550.0, rel=0.02)
    short_srtf = srtf["short"]
    assert short_srtf is not None and short_srtf < 600.0
    assert out["fifo"].unfinished == out["srtf"].unfinished == 0
    mean_srtf, mean_fifo = out["srtf"].mean_jct_s, out["fifo"].mean_jct_s
    assert mean_srtf is not None and mean_fifo is not None and mean_srtf < mean_fifo


def test_completion_times_count_from_the_original_submit() -> None:
    out = forecast(_four_gpus(at_s=1000.0), ["fifo"])["fifo"]
    # JCTs: long 600 + 500, big 300 + 1500, short 200 + 1550 (FIFO order).
    assert out.mean_jct_s == pytest.approx((1100 + 1800 + 1750) / 3, rel=0.02)
    assert out.makespan_s == pytest.approx(1550.0, rel=0.02)
    assert out.stopped is None and out.wall_s > 0


def test_a_lone_running_job_finishes_after_its_remaining_work() -> None:
    clock = ManualClock()
    cluster = make_cluster(nodes=1, gpus=4)
    live = LiveCluster(
        cluster, make_policy("fifo"), ConsolidatedPlacer(cluster), round_interval_s=5, clock=clock
    )
    live.add_job(make_job("a", 4, duration_s=400))
    clock.t = 100.0
    state = live.live_state()
    (job,) = state.jobs
    assert job.status is JobStatus.RUNNING and job.allocation is not None
    assert job.done_fraction == pytest.approx(0.25)
    assert job.attained_gpu_s == pytest.approx(400.0)
    for name in ("fifo", "tiresias"):
        finish = forecast(state, [name])[name].finish_s["a"]
        assert finish == pytest.approx(300.0, rel=0.01), name


def test_resumed_jobs_keep_their_service_gpus_and_history() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    sim = Simulator(cluster, [], make_policy("fifo"), ConsolidatedPlacer(cluster), SimConfig())
    sim.advance(100.0)
    alloc = Allocation.whole([(0, 2), (0, 3)])
    sim.resume(
        ResumedJob(
            make_job("r", 2, submit_s=10.0),
            status=JobStatus.RUNNING,
            done_fraction=0.4,
            attained_gpu_s=77.0,
            restarts=2,
            first_start_s=20.0,
            allocation=alloc,
        )
    )
    sim.resume(ResumedJob(make_job("p", 1, submit_s=30.0), status=JobStatus.PREEMPTED))
    views = {v.job_id: v for v in sim.views()}
    running, waiting = views["r"], views["p"]
    assert running.allocation == alloc and running.restarts == 2
    assert running.attained_gpu_s == pytest.approx(77.0) and running.first_start_s == 20.0
    assert running.progress_at(100.0) == pytest.approx(0.4)
    assert waiting.status is JobStatus.PREEMPTED and waiting.allocation is None
    with pytest.raises(ValueError, match="GPUs are not free"):
        sim.resume(ResumedJob(make_job("x", 1), status=JobStatus.RUNNING, allocation=alloc))
    with pytest.raises(ValueError, match="after the clock"):
        sim.resume(ResumedJob(make_job("y", 1, submit_s=500.0)))


def test_a_running_job_on_a_down_node_waits_instead() -> None:
    state = _four_gpus()
    down = LiveState(
        now_s=state.now_s, cluster=state.cluster, jobs=state.jobs, down_nodes=frozenset({0})
    )
    out = forecast(down, ["fifo"], Limits(horizon_s=10_000))["fifo"]
    assert out.unfinished == 3 and out.stopped == "horizon"
    assert any("its GPUs are not free" in note for note in out.notes)


def _two_nodes(
    *, cordoned: frozenset[int] = frozenset(), draining: frozenset[int] = frozenset()
) -> LiveState:
    """Two 4-GPU nodes at live time 1000: `long` holds node 0 (500 s left), `half`
    two GPUs of node 1 (100 s left); `w` waits for two GPUs, which node 1 has free."""
    at_s = 1000.0
    long = ResumedJob(
        spec=make_job("long", 4, submit_s=0.0, duration_s=1000),
        status=JobStatus.RUNNING,
        done_fraction=0.5,
        allocation=Allocation.whole((0, g) for g in range(4)),
    )
    half = ResumedJob(
        spec=make_job("half", 2, submit_s=0.0, duration_s=200),
        status=JobStatus.RUNNING,
        done_fraction=0.5,
        allocation=Allocation.whole([(1, 0), (1, 1)]),
    )
    waiting = ResumedJob(spec=make_job("w", 2, submit_s=at_s - 10, duration_s=50))
    return LiveState(
        now_s=at_s,
        cluster=make_cluster(nodes=2, gpus=4),
        jobs=(long, half, waiting),
        cordoned_nodes=cordoned,
        draining_nodes=draining,
        round_interval_s=0,
    )


def test_a_cordoned_node_runs_its_jobs_on_and_takes_no_new_one() -> None:
    free = forecast(_two_nodes(), ["fifo"])["fifo"].finish_s
    assert free["w"] == pytest.approx(50.0, rel=0.02)  # node 1's free GPUs, at once
    cordoned = forecast(_two_nodes(cordoned=frozenset({1})), ["fifo"])["fifo"].finish_s
    assert cordoned["half"] == pytest.approx(100.0, rel=0.02)  # runs on, not preempted
    # `w` waits for node 0, which `long` frees after 500 s
    assert cordoned["w"] == pytest.approx(550.0, rel=0.02)


def test_a_draining_nodes_jobs_are_preempted_and_wait_elsewhere() -> None:
    out = forecast(_two_nodes(draining=frozenset({1})), ["fifo"])["fifo"].finish_s
    # `half` leaves node 1 at once (its progress kept) and restarts on node 0 beside
    # `w` once `long` ends: its 100 s left plus a restart's overhead
    half = out["half"]
    assert half is not None and 500.0 + 100.0 < half < 500.0 + 200.0
    assert out["w"] == pytest.approx(550.0, rel=0.02)


def test_the_live_state_names_the_cordoned_nodes() -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    live = LiveCluster(
        cluster, make_policy("fifo"), ConsolidatedPlacer(cluster), clock=ManualClock()
    )
    live.maintain(cluster.nodes[1].name, NodeAction.CORDON, "root")
    state = live.live_state()
    assert state.cordoned_nodes == frozenset({1}) and state.down_nodes == frozenset()


def test_caps_refuse_or_flag() -> None:
    state = _four_gpus()
    with pytest.raises(WhatIfTooLarge, match="3 active jobs; a what-if replays at most 2"):
        forecast(state, ["fifo"], Limits(max_jobs=2))
    short = forecast(state, ["fifo"], Limits(horizon_s=700))["fifo"]
    assert short.stopped == "horizon" and short.unfinished == 2
    assert short.finish_s["big"] is None and short.finish_s["long"] is not None
    assert short.makespan_s is None and short.mean_jct_s is not None
    # `big` started and had not finished; `short` never started.
    assert list(short.not_started) == ["short"]
    assert short.not_started["short"].startswith("still waits at the horizon (700 s) (")
    out_of_time = forecast(state, ["fifo"], Limits(wall_budget_s=0.0))["fifo"]
    assert out_of_time.stopped == "wall-time" and out_of_time.unfinished == 3
    assert set(out_of_time.not_started) == {"big", "short"}
    assert out_of_time.not_started["big"].startswith("still waits at the wall-time cap")
    with pytest.raises(UnknownPolicyError, match="nope"):
        forecast(state, ["fifo", "nope"])


def test_every_registered_policy_forecasts_every_job() -> None:
    state = _four_gpus()
    down = LiveState(
        now_s=state.now_s,
        cluster=make_cluster(nodes=2, gpus=4),
        jobs=state.jobs,
        down_nodes=frozenset({1}),
        round_interval_s=60,
    )
    out = forecast(down, policy_names())
    assert list(out) == policy_names()
    for name, result in out.items():
        assert result.unfinished == 0 and result.stopped is None, name
        assert set(result.finish_s) == {"long", "big", "short"}, name


def test_a_job_larger_than_the_cluster_never_starts_and_says_why() -> None:
    """No "0 s" for a job that cannot start: no finish, the reason, and the others'
    forecasts run to their end (not to the horizon)."""
    state = _four_gpus()
    huge = ResumedJob(spec=make_job("huge", 8, submit_s=state.now_s - 100, duration_s=60))
    out = forecast(replace(state, jobs=(*state.jobs, huge)), ["fifo", "srtf"])
    for result in out.values():
        assert result.finish_s["huge"] is None and result.finish_s["short"] is not None
        assert result.stopped is None and result.unfinished == 1
        assert result.not_started == {
            "huge": "can never start on this cluster (Unschedulable: needs 8 GPUs;"
            " the cluster has 4)"
        }
