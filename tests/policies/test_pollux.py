"""Pollux: goodput model, batch size, GPU limits, the genetic search, replay."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.model import Allocation, JobSpec, JobStatus, JobView, Measured, Snapshot
from controller.model.catalog import resolve
from controller.model.perf import packed_gpu_signature, signature_time_s
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.pollux import Pollux, PolluxState
from policies.pollux.goodput import (
    app_key,
    fit_scales,
    goodput_at_batch,
    goodput_table,
    noise_ratio,
    progress_bucket,
)
from policies.pollux.search import Problem, fitness, search
from tests.builders import make_cluster, make_job, make_view
from tests.policies.invariants import check_round, random_snapshot

APPS = ("cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet")


def _elastic(
    job_id: str, model: str, *, lo: int = 1, hi: int = 64, submit_s: float = 0.0
) -> JobSpec:
    return make_job(
        job_id, lo, model=model, min_gpus=lo, max_gpus=hi, submit_s=submit_s, duration_s=3600.0
    )


def _snapshot(
    views: list[JobView], nodes: int = 4, gpus: int = 4, now_s: float = 600.0
) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=now_s, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def _running(
    spec: JobSpec, alloc: Allocation, progress: float = 0.0, now_s: float = 600.0
) -> JobView:
    return make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=alloc,
        now_s=now_s,
        done_iters=progress * (spec.duration_s or 1.0),
    )


# -- invariants ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(30))
def test_round_invariants(seed: int) -> None:
    plan = check_round(Pollux(), random_snapshot(seed))
    snapshot = random_snapshot(seed)
    by_id = {j.job_id: j for j in snapshot.jobs}
    for job_id, alloc in plan.run.items():
        spec = by_id[job_id].spec
        assert spec.min_gpus <= alloc.num_gpus <= spec.max_gpus
        if not spec.elastic:
            assert alloc.num_gpus == spec.num_gpus
        assert all(s.fraction == 1.0 for s in alloc.shares)
    _assert_one_distributed_job_per_node(plan.run.values())


def _assert_one_distributed_job_per_node(allocs: Iterable[Allocation]) -> None:
    seen: dict[int, int] = {}
    for alloc in allocs:
        if len(alloc.nodes) > 1:
            for node in alloc.nodes:
                seen[node] = seen.get(node, 0) + 1
    assert all(count == 1 for count in seen.values()), seen


def test_same_snapshot_and_state_give_the_same_plan_over_rounds() -> None:
    snapshot = random_snapshot(9)
    first = Pollux().schedule(snapshot, None)
    later = replace(snapshot, now_s=snapshot.now_s + 60.0)
    a = Pollux().schedule(later, first.state)
    b = Pollux().schedule(later, first.state)
    assert dict(a.run) == dict(b.run) and a.batch_sizes == b.batch_sizes
    assert isinstance(a.state, PolluxState)
    assert isinstance(b.state, PolluxState) and len(a.state.parts) == len(b.state.parts) == 1
    assert np.array_equal(a.state.parts[0].population, b.state.parts[0].population)


# -- goodput model ------------------------------------------------------------------


@pytest.mark.parametrize("app", APPS)
def test_throughput_model_matches_the_performance_model(app: str) -> None:
    cluster = load_cluster("16x4")
    profile = resolve(app)
    key = app_key(profile, None, None)
    _, batches = goodput_table(cluster, profile, key, 0, 16)
    goodput, _ = goodput_table(cluster, profile, replace(key, adaptive=False), 0, 16)
    for nodes, gpus in [(1, 1), (1, 4), (2, 8), (4, 13)]:
        alloc = Allocation.whole((n, g) for n in range(nodes) for g in range(4) if n * 4 + g < gpus)
        want = 1.0 / signature_time_s(
            profile, packed_gpu_signature(cluster, alloc), batch_size=key.ref_batch
        )
        assert goodput[nodes, gpus] == pytest.approx(want, rel=1e-6)
        assert batches[nodes, gpus] >= profile.batch_size


@pytest.mark.parametrize(
    ("app", "early", "late"),
    [
        ("cifar10", 0.02, 0.95),
        ("yolov3", 0.02, 0.95),
        ("imagenet", 0.02, 0.6),
        ("deepspeech2", 0.02, 0.5),
    ],
)
def test_the_best_batch_grows_with_the_noise_scale(app: str, early: float, late: float) -> None:
    cluster = load_cluster("16x4")
    profile = resolve(app)
    key = app_key(profile, None, None)
    assert noise_ratio(profile, key, late) > noise_ratio(profile, key, early)
    _, small = goodput_table(cluster, profile, key, progress_bucket(early), 16)
    _, large = goodput_table(cluster, profile, key, progress_bucket(late), 16)
    shapes = [(1, 1), (1, 4), (2, 8), (4, 16)]
    assert all(large[n, k] >= small[n, k] for n, k in shapes)
    assert any(large[n, k] > small[n, k] for n, k in shapes)


def test_the_plan_raises_a_running_jobs_batch_as_it_progresses() -> None:
    alloc = Allocation.whole((0, g) for g in range(4))
    spec = make_job("c", 4, model="cifar10", duration_s=3600.0)  # rigid: the GPUs stay
    early = Pollux().schedule(_snapshot([_running(spec, alloc, 0.02)], nodes=1), None)
    late = Pollux().schedule(_snapshot([_running(spec, alloc, 0.95)], nodes=1), None)
    assert early.run["c"] is alloc and late.run["c"] is alloc  # same GPUs: no restart
    assert late.batch_sizes["c"] > early.batch_sizes["c"] >= resolve("cifar10").batch_size


def _report(batch_size: int, grad_var: float) -> Measured:
    """A 4-GPU job's report at step 100: 1,000 samples/s at `batch_size`, |G|^2 = 1."""
    return Measured(590.0, 100, batch_size, 4, 1000.0, grad_sqr=1.0, grad_var=grad_var)


@pytest.mark.parametrize("grad_var", [1e-3, 1e3])
def test_a_live_jobs_own_gradient_statistics_choose_its_batch(grad_var: float) -> None:
    """Early on, the profile's noise ratio is small; a job that reports a large noise
    (tr(Sigma) per sample >> M_ref |G|^2) is worth a large batch, a small one is not."""
    alloc = Allocation.whole((0, g) for g in range(4))
    spec = make_job("c", 4, model="cifar10", duration_s=3600.0)
    view = _running(spec, alloc, 0.02)
    measured = _report(128, grad_var)
    profiled = Pollux().schedule(_snapshot([view], nodes=1), None).batch_sizes["c"]
    live = Pollux().schedule(_snapshot([replace(view, measured=measured)], nodes=1), None)
    if grad_var > 1.0:
        assert live.batch_sizes["c"] > profiled
    else:
        assert live.batch_sizes["c"] == resolve("cifar10").batch_size <= profiled


def test_a_model_without_gradient_statistics_keeps_its_batch() -> None:
    spec = _elastic("r", "resnet50", hi=4)
    plan = Pollux().schedule(_snapshot([make_view(spec)], nodes=1), None)
    assert plan.run["r"].num_gpus >= 1
    assert "r" not in plan.batch_sizes


@pytest.mark.parametrize(("grad_var", "grows"), [(1e4, True), (0.0, False)])
def test_an_unprofiled_job_that_reports_its_statistics_gets_a_batch_from_them(
    grad_var: float, grows: bool
) -> None:
    """The example `mlp` has no published profile. Until it reports, it keeps its batch
    (no batch size in the plan); once it reports gradient statistics it is adaptive:
    a large noise (tr(Sigma) per sample >> M_0 |G|^2) keeps a large batch efficient,
    so Pollux raises it for throughput; no noise (every sample counts once, r = 0)
    makes any larger batch a loss, so it stays at its own."""
    alloc = Allocation.whole((0, g) for g in range(4))
    spec = replace(make_job("m", 4, model="mlp", duration_s=3600.0), batch_size=64)
    assert resolve("mlp").measured is None
    view = replace(_running(spec, alloc, 0.1), batch_size=64)
    before = Pollux().schedule(_snapshot([view], nodes=1), None)
    assert before.run["m"] is alloc and "m" not in before.batch_sizes
    measured = _report(64, grad_var)
    after = Pollux().schedule(_snapshot([replace(view, measured=measured)], nodes=1), None)
    assert after.run["m"] is alloc  # same GPUs: a new batch needs no restart
    batch = after.batch_sizes["m"]
    assert 64 <= batch <= 16 * 64
    assert (batch > 64) is grows


def test_an_unprofiled_jobs_batch_range_is_set_by_max_batch_sizes() -> None:
    alloc = Allocation.whole((0, g) for g in range(4))
    spec = replace(make_job("m", 4, model="mlp", duration_s=3600.0), batch_size=64)
    measured = _report(64, 1e6)
    view = replace(_running(spec, alloc, 0.1), batch_size=64, measured=measured)
    plan = Pollux(max_batch_sizes={"mlp": 128}).schedule(_snapshot([view], nodes=1), None)
    assert 64 < plan.batch_sizes["m"] <= 128


def _rows(cluster_nodes: int, sync_slowdown: float) -> tuple[tuple[int, int, float], ...]:
    """(GPUs, batch, samples/s) an `mlp` job would report at 1, 2 and 4 GPUs on one
    node: the generic model's times, with the 2- and 4-GPU iterations `sync_slowdown`
    times slower (a slow interconnect the model does not know)."""
    cluster = make_cluster(nodes=cluster_nodes, gpus=4)
    profile = resolve("mlp")
    rows = []
    for gpus in (1, 2, 4):
        alloc = Allocation.whole((0, g) for g in range(gpus))
        sig = packed_gpu_signature(cluster, alloc)
        step_s = signature_time_s(profile, sig, batch_size=64 * gpus)
        if gpus > 1:
            step_s *= sync_slowdown
        rows.append((gpus, 64 * gpus, 64 * gpus / step_s))
    return tuple(rows)


def test_an_unprofiled_jobs_throughput_is_fitted_to_its_reports() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    profile = resolve("mlp")
    assert fit_scales(cluster, profile, ()) == (1.0, 1.0)
    grad, sync = fit_scales(cluster, profile, _rows(1, 1.0))
    assert grad == pytest.approx(1.0, rel=0.1) and sync == pytest.approx(1.0, rel=0.35)
    grad_slow, sync_slow = fit_scales(cluster, profile, _rows(1, 3.0))
    assert grad_slow == pytest.approx(grad, rel=0.1)  # one GPU as the model says
    assert sync_slow > 3 * sync  # the multi-GPU steps' extra time is synchronisation


def test_an_unprofiled_job_that_scales_badly_is_given_fewer_gpus() -> None:
    """Pollux sizes an elastic unprofiled job by its own reports: the same job whose
    2- and 4-GPU steps it reported 10x slower than the model (its goodput on 2 GPUs
    below its goodput on one, even at the larger batches it would then get) gets
    fewer GPUs."""
    spec = replace(_elastic("m", "mlp", lo=1, hi=4), batch_size=64)
    alloc = Allocation.whole([(0, 0), (0, 1)])
    sizes = {}
    for slowdown in (1.0, 10.0):
        measured = Measured(590.0, 100, 128, 2, 1000.0, _rows(1, slowdown), (), 1.0, 1e3)
        view = replace(_running(spec, alloc, 0.1), batch_size=128, measured=measured)
        plan = Pollux().schedule(_snapshot([view], nodes=1), None)
        sizes[slowdown] = plan.run["m"].num_gpus
    assert sizes[10.0] < sizes[1.0], sizes


# -- GPU limits ---------------------------------------------------------------------


def test_a_job_never_gets_more_than_its_max_or_fewer_than_its_min() -> None:
    views = [
        make_view(_elastic("few", "cifar10", lo=3, hi=5)),
        make_view(_elastic("many", "imagenet", lo=2, hi=6)),
        make_view(make_job("rigid", 8, model="bert")),
    ]
    views += [make_view(_elastic(f"s{i}", "ncf", hi=2)) for i in range(6)]
    for growth in (0.0, 2.0):
        for nodes in (1, 2, 4, 8):
            snapshot = _snapshot(views, nodes=nodes)
            plan = Pollux(growth_factor=growth).schedule(snapshot, None)
            by_id = {v.job_id: v for v in views}
            for job_id, alloc in plan.run.items():
                spec = by_id[job_id].spec
                assert spec.min_gpus <= alloc.num_gpus <= spec.max_gpus
            if "rigid" in plan.run:
                assert plan.run["rigid"].num_gpus == 8
            for view in views:
                if view.job_id not in plan.run:
                    assert plan.reason_for(view.job_id) is not None


def test_a_new_job_starts_on_one_gpu_then_may_double() -> None:
    spec = _elastic("i", "imagenet")
    view = make_view(spec)
    plan = Pollux().schedule(_snapshot([view], nodes=4), None)
    assert plan.run["i"].num_gpus == 1
    running = _running(spec, plan.run["i"], 0.1, now_s=660.0)
    again = Pollux().schedule(_snapshot([running], nodes=4, now_s=660.0), plan.state)
    assert again.run["i"].num_gpus <= 2
    unbounded = Pollux(growth_factor=0.0).schedule(_snapshot([view], nodes=4), None)
    assert unbounded.run["i"].num_gpus > 2


def test_a_job_larger_than_the_cluster_waits_with_a_reason() -> None:
    plan = Pollux().schedule(_snapshot([make_view(make_job("big", 32))], nodes=2), None)
    assert plan.run == {}
    reason = plan.reason_for("big")
    assert reason is not None and reason.code == "InsufficientGpus"


def test_a_rigid_gang_beyond_its_models_largest_batch_still_starts() -> None:
    # BERT's largest batch (384) at its smallest local batch (4) uses 96 GPUs; a rigid
    # 128-GPU BERT job needs a batch of 512. Alone on 32x4 GPUs it must start, on 128.
    profile = resolve("bert")
    assert app_key(profile, None, None).max_batch < 128 * 4
    assert app_key(profile, None, None, 128).max_batch == 512
    spec = make_job("b", 128, model="bert", duration_s=3600.0)
    plan = Pollux().schedule(_snapshot([make_view(spec)], nodes=32, gpus=4), None)
    assert plan.run["b"].num_gpus == 128


def test_jobs_left_out_wait_for_lack_of_goodput_gain() -> None:
    views = [make_view(_elastic(f"j{i}", "cifar10", submit_s=i)) for i in range(6)]
    plan = Pollux().schedule(_snapshot(views, nodes=1), None)
    assert len(plan.run) == 4
    for view in views:
        if view.job_id not in plan.run:
            reason = plan.reason_for(view.job_id)
            assert reason is not None and reason.code == "NoGoodputGain"


def test_a_kept_allocation_is_the_same_object() -> None:
    alloc = Allocation.whole((0, g) for g in range(2))
    spec = _elastic("k", "bert", hi=2)
    plan = Pollux().schedule(_snapshot([_running(spec, alloc, 0.3)], nodes=1), None)
    assert plan.run["k"] is alloc


# -- search -------------------------------------------------------------------------


def _hand_built_problem() -> Problem:
    """4 jobs on 2 nodes of 4 GPUs; speedup sqrt(k) on one node, 0.8·sqrt(k) on two."""
    jobs, nodes, kdim, ndim = 4, 2, 9, 3
    table = np.zeros((jobs, ndim, kdim))
    ks = np.arange(kdim)
    table[:, 1, :] = np.sqrt(ks)
    table[:, 2, :] = 0.8 * np.sqrt(ks)
    base = np.zeros((jobs, nodes), dtype=np.float32)
    base[0] = [4, 4]  # naive: one job holds the whole cluster
    return Problem(
        capacity=np.array([4, 4], dtype=np.float32),
        base=base,
        lo=np.ones(jobs, dtype=np.float32),
        hi=np.full(jobs, 8, dtype=np.float32),
        speedup=table.ravel(),
        ndim=ndim,
        kdim=kdim,
        restart_factor=np.ones(jobs),
        p=-1.0,
        avoid_interference=True,
    )


def test_the_search_beats_a_naive_allocation() -> None:
    problem = _hand_built_problem()
    naive = fitness(problem, problem.base[None])[0]
    best = np.array([[2, 0], [2, 0], [0, 2], [0, 2]], dtype=np.float32)
    optimum = fitness(problem, best[None])[0]
    result = search(
        problem,
        problem.base[None],
        population_size=100,
        generations=100,
        patience=0,
        rng=np.random.default_rng(0),
    )
    assert naive < 0.01 < optimum
    assert result.best_fitness == pytest.approx(optimum, rel=1e-6)
    assert sorted(result.best.sum(axis=1).tolist()) == [2, 2, 2, 2]


def test_repair_keeps_one_distributed_job_per_node_and_node_capacity() -> None:
    problem = _hand_built_problem()
    states = np.array([[[3, 1], [2, 2], [4, 4], [0, 1]]], dtype=np.float32)
    result = search(
        problem, states, population_size=1, generations=0, patience=0, rng=np.random.default_rng(1)
    )
    fixed = result.population[0]
    assert (fixed.sum(axis=0) <= problem.capacity).all()
    distributed = (fixed > 0).sum(axis=1) > 1
    assert ((fixed[distributed] > 0).sum(axis=0) <= 1).all()
    assert fixed[0].tolist() == [3, 1]  # first in the priority order keeps its GPUs


# -- replay -------------------------------------------------------------------------


@pytest.mark.slow
def test_replay_of_an_adaptdl_workload_finishes_every_job(tmp_path: Path) -> None:
    rows = ["name,time,application,num_replicas,batch_size"]
    rng = np.random.default_rng(3)
    for i in range(16):
        app = ("cifar10", "ncf", "cifar10", "bert", "deepspeech2", "yolov3")[i % 6]
        replicas = int(rng.choice([1, 2, 4]))
        rows.append(f"{app}-{i},{i * 300},{app},{replicas},{resolve(app).batch_size * replicas}")
    path = tmp_path / "workload.csv"
    path.write_text("\n".join(rows) + "\n")
    trace = load_trace(path, "adaptdl")
    cluster = load_cluster("16x4")
    sim = Simulator(
        cluster,
        trace.jobs,
        Pollux(generations=30),
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, check_plans=True),
    )
    result = sim.run()
    assert len(result.jobs) == 16
    assert all(o.finish_s is not None for o in result.jobs)
    assert result.gpu_s_allocated <= result.gpu_s_capacity + 1e-6


@pytest.mark.slow
def test_the_papers_order_on_its_workload_2_on_its_testbed() -> None:
    """Pollux < Tiresias < Optimus in average JCT (OSDI'21 §5.2), on the artifact's
    workload-2 replayed on 16 g4dn.12xlarge nodes, the baselines configured as the
    paper ran them (bench/pollux.py records all eight workloads)."""
    from policies.optimus import Optimus
    from policies.tiresias import Tiresias

    trace = load_trace(
        Path(__file__).parents[2] / "examples" / "traces" / "pollux" / "workload-2.csv"
    )
    cluster = load_cluster("g4dn-12xlarge:16")
    policies = {
        "pollux": Pollux(),
        "tiresias": Tiresias(thresholds_gpu_s=(16 * 3600.0,), starve_limit=0.0),
        "optimus": Optimus(resize_hysteresis=-1.0),
    }
    avg: dict[str, float] = {}
    for name, policy in policies.items():
        sim = Simulator(
            cluster,
            trace.jobs,
            policy,
            ConsolidatedPlacer(cluster),
            SimConfig(round_interval_s=60.0),
        )
        result = sim.run()
        jcts = [o.finish_s - o.submit_s for o in result.jobs if o.finish_s is not None]
        assert len(jcts) == 160
        avg[name] = sum(jcts) / len(jcts)
    assert avg["pollux"] < 0.8 * avg["tiresias"]
    assert avg["tiresias"] < avg["optimus"]


def test_a_zero_gradient_norm_frees_the_batch_instead_of_pinning_it() -> None:
    """deepspeech2's batch-20 run measures a gradient norm of zero late in training:
    every sample counts there (EFFICIENCY = 1), so Pollux grows the batch for
    throughput instead of keeping the reference batch."""
    from controller.model.catalog import measured_profile

    measured = measured_profile("deepspeech2")
    assert measured is not None
    late = next(r.progress for r in measured.validation[20] if r.grad_sqr == 0 and r.progress > 0)
    spec = JobSpec(
        job_id="d",
        submit_s=0.0,
        num_gpus=1,
        min_gpus=1,
        max_gpus=16,
        model="deepspeech2",
        iterations=measured.target_progress,
        batch_size=20,
    )
    cluster = make_cluster(4, 4)
    placer = ConsolidatedPlacer(cluster)
    alloc = Allocation.whole([(0, 0)])
    view = replace(
        make_view(
            spec,
            status=JobStatus.RUNNING,
            allocation=alloc,
            now_s=3600.0,
            done_iters=late,
            total_iters=measured.target_progress,
        ),
        batch_size=20,
    )
    snapshot = Snapshot(now_s=3600.0, cluster=cluster, jobs=(view,), placer=placer)
    plan = Pollux().schedule(snapshot, None)
    assert plan.batch_sizes["d"] > 20


def test_a_running_job_keeps_a_batch_within_the_margin_and_leaves_one_far_below() -> None:
    """Hysteresis (issue 25): on the same GPUs, a batch whose goodput is within
    `batch_margin` of the best one's stays (each change is a learning-rate change);
    one far below it is replaced by the best."""
    alloc = Allocation.whole((0, g) for g in range(4))
    spec = make_job("c", 4, model="cifar10", duration_s=3600.0)
    view = _running(spec, alloc, 0.95)
    best = Pollux().schedule(_snapshot([view], nodes=1), None).batch_sizes["c"]
    profile = resolve("cifar10")
    key = app_key(profile, None, None)
    bucket = progress_bucket(0.95)
    cluster = make_cluster(nodes=1, gpus=4)
    goodput, _ = goodput_table(cluster, profile, key, bucket, 4)
    top = float(goodput[1, 4])

    def worth(batch: int) -> float:
        return goodput_at_batch(cluster, profile, key, bucket, key.ref_batch, None, (1, 4), batch)

    near = next(b for b in range(best - 1, 0, -1) if 0.97 * top <= worth(b) < top)
    far = resolve("cifar10").batch_size
    assert worth(far) < top / 1.05  # the profile's batch is far below the best late on
    for current, expected in ((near, near), (far, best)):
        plan = Pollux().schedule(_snapshot([replace(view, batch_size=current)], nodes=1), None)
        assert plan.run["c"] is alloc
        assert plan.batch_sizes["c"] == expected, (current, plan.batch_sizes["c"])
