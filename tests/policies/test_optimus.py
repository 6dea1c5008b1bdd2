"""Optimus: loss-curve and speed fits, greedy marginal gain, fewest servers, replay."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import nnls

from controller.model import (
    Action,
    Allocation,
    Cluster,
    GpuPool,
    JobStatus,
    JobView,
    Measured,
    Snapshot,
)
from controller.model.gpu_choice.best_fit import fewest_servers
from controller.placement import ConsolidatedPlacer
from policies.optimus import JobMemory, Optimus, OptimusState
from policies.optimus.fit import (
    CONVERGENCE_THRESHOLD,
    LossCurve,
    fit_loss_curve,
    nnls2,
    true_loss_curve,
)
from tests.builders import make_cluster, make_job, make_view
from tests.policies.invariants import check_round, random_snapshot


@pytest.mark.parametrize("seed", range(30))
def test_round_invariants_first_and_second_round(seed: int) -> None:
    snapshot = random_snapshot(seed)
    plan = check_round(Optimus(), snapshot)
    assert isinstance(plan.state, OptimusState)
    check_round(Optimus(), snapshot, plan.state)  # with what it learnt


def test_nnls2_matches_scipy_nnls() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = rng.uniform(0, 10, 12)
        z = rng.normal(0, 1, 12) + rng.choice([-2.0, 2.0]) * x + rng.normal(0, 3)
        w = rng.uniform(0.1, 2, 12)
        a, b = nnls2(
            np.array([w.sum()]),
            np.array([w @ x]),
            np.array([w @ (x * x)]),
            np.array([w @ z]),
            np.array([w @ (x * z)]),
            float(w @ (z * z)),
        )
        root = np.sqrt(w)
        expected, _ = nnls(np.stack([x, np.ones_like(x)], axis=1) * root[:, None], z * root)
        assert a[0] == pytest.approx(expected[0], abs=1e-7)
        assert b[0] == pytest.approx(expected[1], abs=1e-7)


def test_loss_fit_recovers_beta_on_a_noisy_curve() -> None:
    truth = LossCurve(beta0=0.2, beta1=0.5, beta2=0.3)
    rng = random.Random(1)
    epochs = [0.5 * i for i in range(80)]
    losses = [truth.loss(e) + rng.gauss(0.0, 0.005) for e in epochs]
    fit = fit_loss_curve(epochs, losses)
    assert fit is not None
    assert fit.beta0 == pytest.approx(truth.beta0, rel=0.1)
    assert fit.beta1 == pytest.approx(truth.beta1, rel=0.1)
    assert fit.beta2 == pytest.approx(truth.beta2, abs=0.02)
    assert fit.converged_epoch() == pytest.approx(truth.converged_epoch(), rel=0.05)


def test_a_perfect_fit_of_the_ground_truth_recovers_the_total_iterations() -> None:
    curve, per_epoch = true_loss_curve("j", 50_000.0)
    assert curve.converged_epoch(CONVERGENCE_THRESHOLD) * per_epoch == pytest.approx(50_000.0)


def test_remaining_iterations_converge_to_the_truth_as_losses_accumulate() -> None:
    total = 200_000.0
    cluster = make_cluster(nodes=1, gpus=4)
    spec = make_job("j", 1, duration_s=total)
    policy = Optimus()
    state: object = None
    errors: list[float] = []
    for step in range(1, 41):
        done = total * step / 42
        view = make_view(
            spec,
            status=JobStatus.RUNNING,
            allocation=Allocation.whole([(0, 0)]),
            now_s=float(step),
            done_iters=done,
            total_iters=total,
        )
        snap = Snapshot(now_s=float(step), cluster=cluster, jobs=(view,), placer=_placer(cluster))
        state = policy.schedule(snap, state).state
        assert isinstance(state, OptimusState)
        mem = state.jobs["j"]
        assert all(k <= done for k, _ in mem.losses)  # never a loss from the future
        if mem.curve is not None:
            estimate = mem.curve.converged_epoch() * mem.iters_per_epoch
            errors.append(abs(estimate - total) / total)
    assert errors, "no fit after 40 rounds"
    assert errors[-1] < 0.05
    assert errors[-1] <= max(errors[: len(errors) // 2])


def test_a_live_job_is_fitted_to_the_losses_it_reports() -> None:
    """Reports (JobView.measured) replace the synthetic curve: a job whose reported
    losses follow a curve that converges at 30 epochs of 500 steps is estimated at
    15,000 steps whatever its duration hint (its synthetic curve ends at 200,000)."""
    true = LossCurve(1.0 / (CONVERGENCE_THRESHOLD * 900.0), 0.0, 0.2)  # e* = 30
    epoch_steps, total = 500, 15_000
    cluster = make_cluster(nodes=1, gpus=4)
    spec = make_job("j", 1, duration_s=200_000.0)
    policy, state = Optimus(), None
    estimates = []
    for step in range(250, total // 2 + 1, 250):
        losses = tuple((k, true.loss(k / epoch_steps)) for k in range(250, step + 1, 250))
        measured = Measured(
            reported_s=float(step),
            step=step,
            batch_size=64,
            gpus=1,
            samples_per_s=640.0,
            losses=losses[-64:],
            epoch_steps=epoch_steps,
        )
        view = dataclasses.replace(
            make_view(
                spec,
                status=JobStatus.RUNNING,
                allocation=Allocation.whole([(0, 0)]),
                now_s=float(step),
                done_iters=float(step),
                total_iters=200_000.0,
            ),
            measured=measured,
        )
        snap = Snapshot(now_s=float(step), cluster=cluster, jobs=(view,), placer=_placer(cluster))
        state = policy.schedule(snap, state).state
        assert isinstance(state, OptimusState)
        mem = state.jobs["j"]
        assert mem.iters_per_epoch == epoch_steps
        if mem.curve is not None:
            estimates.append(mem.curve.converged_epoch() * mem.iters_per_epoch)
    # By half-way, within 10 % of the truth (the issue asks 25 % of a real job).
    assert estimates and abs(estimates[-1] - total) / total < 0.10


def _placer(cluster: Cluster) -> ConsolidatedPlacer:
    return ConsolidatedPlacer(cluster)


def _known(
    job_id: str, remaining_iters: float, speeds: dict[int, float], min_gpus: int, max_gpus: int
) -> tuple[JobView, JobMemory]:
    """A queued elastic job whose remaining work and speed per size are given."""
    spec = make_job(job_id, min_gpus, min_gpus=min_gpus, max_gpus=max_gpus)
    # beta1 = 0: the loss converges at e* = 1 / sqrt(beta0·δ); 10 epochs here.
    curve = LossCurve(1.0 / (CONVERGENCE_THRESHOLD * 100.0), 0.0, 0.1)
    table = tuple(speeds[w] for w in range(min_gpus, max_gpus + 1))
    mem = JobMemory(
        iters_per_epoch=remaining_iters / 10.0,
        curve=curve,
        speeds=tuple(sorted(speeds.items())),
        speed_table=table,
    )
    return make_view(spec), mem


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        # (remaining iterations, speed at 2 GPUs); speed at 1 GPU is 1 for both.
        ((1000.0, 1.5), (1000.0, 1.9), "b"),  # b speeds up more
        ((1000.0, 1.9), (1000.0, 1.5), "a"),
        ((3000.0, 1.5), (1000.0, 1.9), "a"),  # a's larger remaining time gains more
    ],
)
def test_the_next_gpu_goes_to_the_largest_marginal_gain(
    a: tuple[float, float], b: tuple[float, float], winner: str
) -> None:
    cluster = make_cluster(nodes=1, gpus=3)
    view_a, mem_a = _known("a", a[0], {1: 1.0, 2: a[1]}, 1, 2)
    view_b, mem_b = _known("b", b[0], {1: 1.0, 2: b[1]}, 1, 2)
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(view_a, view_b), placer=_placer(cluster))
    plan = Optimus().schedule(snap, OptimusState({"a": mem_a, "b": mem_b}))
    sizes = {job_id: alloc.num_gpus for job_id, alloc in plan.run.items()}
    loser = "a" if winner == "b" else "b"
    assert sizes == {winner: 2, loser: 1}


def test_no_gain_no_gpu() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    view, mem = _known("a", 1000.0, {1: 1.0, 2: 0.9, 3: 0.8, 4: 0.7}, 1, 4)
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(view,), placer=_placer(cluster))
    plan = Optimus().schedule(snap, OptimusState({"a": mem}))
    assert plan.run["a"].num_gpus == 1


@pytest.mark.parametrize(("gpus", "expected"), [(8, 3), (2, 2)])
def test_never_more_than_max_nor_fewer_than_min(gpus: int, expected: int) -> None:
    cluster = make_cluster(nodes=1, gpus=gpus)
    speeds = {w: float(w) for w in range(2, 4)}  # linear speed-up: always a gain
    view, mem = _known("a", 1e6, speeds, 2, 3)
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(view,), placer=_placer(cluster))
    plan = Optimus().schedule(snap, OptimusState({"a": mem}))
    assert plan.run["a"].num_gpus == expected


def test_a_job_whose_minimum_does_not_fit_waits_with_a_reason() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    big = make_view(make_job("big", 8, min_gpus=6, max_gpus=8))
    small = make_view(make_job("small", 2))
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(big, small), placer=_placer(cluster))
    plan = Optimus().schedule(snap, None)
    assert "big" not in plan.run
    reason = plan.reason_for("big")
    assert reason is not None and reason.code == "InsufficientGpus"
    assert plan.run["small"].num_gpus == 2  # not elastic: exactly its gang


@pytest.mark.parametrize(("admission", "admitted"), [("arrival", "early"), ("remaining", "late")])
def test_who_gets_the_last_gpu_follows_the_admission_rule(admission: str, admitted: str) -> None:
    # One GPU, two one-GPU jobs: "early" was submitted first but has 100x the work.
    cluster = make_cluster(nodes=1, gpus=1)
    early, mem_early = _known("early", 100_000.0, {1: 1.0}, 1, 1)
    late, mem_late = _known("late", 1_000.0, {1: 1.0}, 1, 1)
    late = make_view(dataclasses.replace(late.spec, submit_s=60.0))
    snap = Snapshot(now_s=120.0, cluster=cluster, jobs=(early, late), placer=_placer(cluster))
    state = OptimusState({"early": mem_early, "late": mem_late})
    plan = Optimus(admission=admission).schedule(snap, state)
    assert set(plan.run) == {admitted}
    waiting = "late" if admitted == "early" else "early"
    reason = plan.reason_for(waiting)
    assert reason is not None and reason.code == "InsufficientGpus"
    assert ("earlier jobs" in reason.message) == (admission == "arrival")


def test_unknown_admission_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="admission must be one of arrival, remaining"):
        Optimus(admission="random")


def test_fewest_servers_for_an_8_gpu_job_on_4_gpu_nodes() -> None:
    cluster = make_cluster(nodes=4, gpus=4)
    # Another job holds 2 GPUs of node 0, so an 8-GPU gang could span 3 nodes.
    other = make_view(
        make_job("other", 2),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole([(0, 0), (0, 1)]),
    )
    job = make_view(make_job("big", 8, duration_s=10_000))
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(other, job), placer=_placer(cluster))
    plan = Optimus().schedule(snap, None)
    assert len(plan.run["big"].nodes) == 2
    assert plan.run["other"] == other.allocation  # kept where it was


def test_fewest_servers_best_fit_then_emptiest() -> None:
    pool = GpuPool([4, 4, 4], [16384] * 3)
    pool.take(Allocation.whole([(1, 0)]))  # node 1 has 3 free
    assert fewest_servers(pool, 3) == Allocation.whole([(1, 1), (1, 2), (1, 3)])
    alloc = fewest_servers(pool, 6)
    assert alloc is not None and alloc.nodes == (0, 2)
    assert fewest_servers(pool, 12) is None


@pytest.mark.parametrize(("speed_at_2", "action"), [(1.001, Action.KEEP), (2.0, Action.RESIZE)])
def test_hysteresis_keeps_a_running_job_unless_the_gain_beats_the_restart(
    speed_at_2: float, action: Action
) -> None:
    cluster = make_cluster(nodes=1, gpus=2)
    spec = make_job("a", 1, min_gpus=1, max_gpus=2)
    view = make_view(
        spec, status=JobStatus.RUNNING, allocation=Allocation.whole([(0, 0)]), rate_ips=1.0
    )
    curve = LossCurve(1.0 / (CONVERGENCE_THRESHOLD * 100.0), 0.0, 0.1)
    mem = JobMemory(
        losses=((0.0, 1.0),),
        iters_per_epoch=1000.0,  # 10 000 iterations left: hours at 1 iteration/s
        curve=curve,
        speeds=((1, 1.0), (2, speed_at_2)),
        speed_table=(1.0, speed_at_2),
    )
    snap = Snapshot(now_s=0.0, cluster=cluster, jobs=(view,), placer=_placer(cluster))
    plan = Optimus().schedule(snap, OptimusState({"a": mem}))
    assert plan.actions(snap)["a"] is action


def test_state_is_explicit_and_rounds_are_deterministic() -> None:
    snapshot = random_snapshot(5)
    policy = Optimus()
    first = policy.schedule(snapshot, None)
    again = policy.schedule(snapshot, None)
    assert first.state == again.state
    assert dict(first.run) == dict(again.run)
    assert set(first.state.jobs) == {j.job_id for j in snapshot.jobs}


def test_replay_of_an_adaptdl_workload_finishes_every_job(tmp_path: Path) -> None:
    from controller.sim import SimConfig, Simulator
    from controller.spec import load_cluster
    from controller.traces import load_trace

    rng = random.Random(4)
    apps = [("cifar10", 128), ("ncf", 256), ("deepspeech2", 20), ("bert", 12)]
    rows = ["name,time,application,num_replicas,batch_size"]
    for i in range(24):
        app, batch = rng.choice(apps)
        rows.append(f"job{i},{i * 120},{app},{rng.choice([1, 2, 4, 8])},{batch}")
    path = tmp_path / "workload.csv"
    path.write_text("\n".join(rows) + "\n")
    trace = load_trace(path)
    cluster = load_cluster("16x4")
    sim = Simulator(
        cluster,
        trace.jobs,
        Optimus(),
        ConsolidatedPlacer(cluster),
        SimConfig(check_plans=True),
    )
    result = sim.run()
    assert len(result.jobs) == 24
    assert all(o.finish_s is not None for o in result.jobs)


def test_speeds_seen_off_the_work_batch_are_kept_in_the_jobs_own_steps() -> None:
    """A cifar10 job at batch 2048 whose work counts batch-128 steps reports work per
    second; Optimus keeps its own steps per second (work / the step's gain), the unit
    its profiled speeds are in, and estimates in work again."""
    from controller.model.perf.work import work_per_step

    spec = dataclasses.replace(
        make_job("c", 4, min_gpus=1, max_gpus=16, duration_s=50_000),
        model="cifar10",
        batch_size=2048,
        work_batch=128,
    )
    cluster = make_cluster(4, 4)
    alloc = fewest_servers(GpuPool([4] * 4, [16384] * 4), 4)
    assert alloc is not None
    view = make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=alloc,
        done_iters=25_000.0,
        total_iters=50_000.0,
        rate_ips=30.0,
    )
    snapshot = Snapshot(now_s=0.0, cluster=cluster, jobs=(view,), placer=_placer(cluster))
    plan = Optimus().schedule(snapshot, None)
    gain = work_per_step(spec, 2048, 0.5)
    assert 1.0 < gain < 16.0
    assert dict(plan.state.jobs["c"].speeds)[4] == pytest.approx(30.0 / gain)
