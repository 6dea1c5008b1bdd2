"""The simulator: event timing worked out by hand, overheads, failures, determinism."""

from __future__ import annotations

import pytest

from controller.model import JobSpec
from controller.model.catalog import resolve
from controller.placement import ConsolidatedPlacer
from controller.rates import RateModel
from controller.records import ReplayResult
from controller.sim import GAIN_STEP, NodeEvent, SimConfig, Simulator
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def _run(
    jobs: list[JobSpec],
    policy: str = "fifo",
    nodes: int = 1,
    gpus: int = 4,
    **config: object,
) -> ReplayResult:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    cfg = SimConfig(**{"round_interval_s": 0.0, "check_plans": True, **config})  # type: ignore[arg-type]
    return Simulator(cluster, jobs, make_policy(policy), ConsolidatedPlacer(cluster), cfg).run()


def _by_id(result: ReplayResult) -> dict[str, object]:
    return {o.job_id: o for o in result.jobs}


def test_a_lone_job_runs_for_its_traced_duration() -> None:
    result = _run([make_job("a", 4, duration_s=500)])
    (out,) = result.jobs
    assert out.first_start_s == 0.0
    assert out.finish_s == pytest.approx(500.0)
    assert out.attained_gpu_s == pytest.approx(2000.0)
    util = resolve("resnet50").gpu_util
    assert util < 1.0
    assert result.gpu_s_allocated == pytest.approx(2000.0)
    assert result.gpu_s_busy == pytest.approx(2000.0 * util)
    assert result.gpu_s_capacity == pytest.approx(4 * 500.0)


def test_fifo_queues_the_second_gang_until_the_first_ends() -> None:
    result = _run([make_job("a", 4, duration_s=300), make_job("b", 4, submit_s=10, duration_s=200)])
    jobs = _by_id(result)
    assert jobs["b"].first_start_s == pytest.approx(300.0)  # type: ignore[attr-defined]
    assert jobs["b"].jct_s == pytest.approx(300.0 + 200.0 - 10.0)  # type: ignore[attr-defined]


def test_rounds_happen_on_interval_boundaries() -> None:
    result = _run([make_job("a", 1, submit_s=10, duration_s=100)], round_interval_s=60.0)
    (out,) = result.jobs
    assert out.first_start_s == pytest.approx(60.0)
    assert out.finish_s == pytest.approx(160.0)


def test_srtf_preemption_costs_the_restart_overhead() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    long = make_job("long", 4, duration_s=1000)
    short = make_job("short", 4, submit_s=100, duration_s=50)
    restart = RateModel(cluster).restart_s(long)
    assert restart > 0
    result = _run([long, short], policy="srtf")
    jobs = _by_id(result)
    assert jobs["short"].finish_s == pytest.approx(150.0)  # type: ignore[attr-defined]
    assert jobs["long"].preemptions == 1  # type: ignore[attr-defined]
    assert jobs["long"].restarts == 1  # type: ignore[attr-defined]
    assert jobs["long"].finish_s == pytest.approx(1050.0 + restart)  # type: ignore[attr-defined]
    # The overhead held GPUs without progress: they were allocated for 1050 s plus the
    # restart, and busy, at the model's utilisation, for the 1050 s of running only.
    util = resolve(long.model).gpu_util
    assert result.gpu_s_allocated == pytest.approx(4 * (1050.0 + restart))
    assert result.gpu_s_busy == pytest.approx(4 * 1050.0 * util)


def test_a_failed_node_rolls_jobs_back_to_their_checkpoint() -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    job = make_job("a", 4, duration_s=1000)
    restart = RateModel(cluster).restart_s(job)
    result = _run(
        [job],
        nodes=2,
        failures=(NodeEvent(700.0, "n0", up=False), NodeEvent(5000.0, "n0", up=True)),
        checkpoint_interval_s=300.0,
    )
    (out,) = result.jobs
    # Checkpoints at 300 and 600 s of running: the 100 s after 600 are lost, and the
    # job restarts on n1 at once: 700 + restart + (1000 - 600).
    assert out.finish_s == pytest.approx(700.0 + restart + 400.0)
    assert out.preemptions == 1


def test_a_job_larger_than_the_cluster_never_runs_and_others_do() -> None:
    result = _run([make_job("huge", 16), make_job("ok", 2, submit_s=1, duration_s=10)])
    jobs = _by_id(result)
    assert jobs["huge"].finish_s is None  # type: ignore[attr-defined]
    assert jobs["ok"].finish_s == pytest.approx(11.0)  # type: ignore[attr-defined]


def test_max_time_leaves_running_jobs_unfinished() -> None:
    result = _run([make_job("a", 1, duration_s=1000)], max_time_s=400.0)
    (out,) = result.jobs
    assert out.finish_s is None
    assert out.attained_gpu_s == pytest.approx(400.0)


def test_same_input_same_result() -> None:
    from controller.traces.formats.synthetic import generate

    jobs = generate(80, seed=3, cluster_gpus=16, load=1.3)
    a = _run(jobs, policy="srtf", nodes=4, round_interval_s=30.0)
    b = _run(jobs, policy="srtf", nodes=4, round_interval_s=30.0)
    assert a.jobs == b.jobs
    assert a.timeline == b.timeline


def test_a_larger_batch_on_the_same_gpus_changes_speed_without_a_restart() -> None:
    from controller.model import Plan, Snapshot
    from controller.placement import packed_allocation

    class GrowBatch:
        """Runs the one job on all GPUs; from t=10 s on at batch 4x."""

        name = "grow-batch"

        def schedule(self, snapshot: Snapshot, state: object) -> Plan:
            run = snapshot.allocations()
            batches: dict[str, int] = {}
            for job in snapshot.jobs:
                alloc = job.allocation or packed_allocation(snapshot.cluster, 4)
                assert alloc is not None
                run[job.job_id] = alloc
                if snapshot.now_s >= 10.0:
                    batches[job.job_id] = 4 * 512
            return Plan(run=run, batch_sizes=batches, wake_s=10.0)

    cluster = make_cluster(nodes=1, gpus=4)
    spec = JobSpec(
        job_id="b", submit_s=0.0, num_gpus=4, model="cifar10", duration_s=1000.0, batch_size=512
    )
    cfg = SimConfig(round_interval_s=0.0)
    result = Simulator(cluster, [spec], GrowBatch(), ConsolidatedPlacer(cluster), cfg).run()
    (out,) = result.jobs
    assert out.restarts == 0

    rates = RateModel(cluster)
    alloc = packed_allocation(cluster, 4)
    assert alloc is not None
    r0 = rates.rate_ips(spec, alloc)
    total = 1000.0 * r0
    done_at_10 = 10.0 * r0
    factor = rates.goodput_factor(spec, 2048, done_at_10 / total)
    assert 1.0 < factor < 4.0  # s (r + 1) / (r + s) with s = 4
    # The gain follows the job's progress: re-rated at each further 1 % of the work.
    raw = rates.rate_ips(spec, alloc, batch_size=2048)
    t, done = 10.0, done_at_10
    while done < total - 1e-9:
        step = min(GAIN_STEP * total, total - done)
        t += step / (raw * rates.goodput_factor(spec, 2048, done / total))
        done += step
    assert out.finish_s == pytest.approx(t, rel=1e-9)
    assert out.finish_s < 10.0 + (total - done_at_10) / (raw * factor)  # the gain grew


def test_new_shares_of_the_same_gpus_restart_the_job_as_live_mps_does() -> None:
    from controller.model import Allocation, GpuShare, Plan, Snapshot

    class PackLater:
        """Job a alone on GPU 0 whole; when b arrives, both get half of GPU 0."""

        name = "pack-later"

        def schedule(self, snapshot: Snapshot, state: object) -> Plan:
            ids = sorted(j.job_id for j in snapshot.jobs)
            if ids == ["a"]:
                return Plan(run={"a": Allocation((GpuShare(0, 0, 1.0),))})
            return Plan(run={i: Allocation((GpuShare(0, 0, 0.5),)) for i in ids})

    cluster = make_cluster(nodes=1, gpus=1)
    a = make_job("a", 1, duration_s=1000, model="ncf", gpu_mem_mib=2048)
    b = make_job("b", 1, submit_s=100, duration_s=1000, model="ncf", gpu_mem_mib=2048)
    cfg = SimConfig(round_interval_s=0.0, check_plans=True)
    result = Simulator(cluster, [a, b], PackLater(), ConsolidatedPlacer(cluster), cfg).run()
    jobs = _by_id(result)
    # An MPS client's share is fixed when its process starts: a re-share is a restart
    # (charged like one), not a preemption.
    assert jobs["a"].restarts == 1  # type: ignore[attr-defined]
    assert jobs["a"].preemptions == 0  # type: ignore[attr-defined]
    # Both ran packed from t=100 on, and held GPU-seconds count the shares by fraction.
    assert jobs["a"].attained_gpu_s == pytest.approx(  # type: ignore[attr-defined]
        100.0 + 0.5 * (jobs["a"].finish_s - 100.0)  # type: ignore[attr-defined]
    )
    # Packing two light jobs (ncf alone keeps a GPU 30 % busy) pays for the restart:
    # both finish well before they would one after the other, and the GPU is never
    # more than wholly busy.
    makespan = max(o.finish_s for o in result.jobs)  # type: ignore[type-var]
    assert makespan < 100.0 + 2 * 1000.0 * 0.7
    assert resolve("ncf").gpu_util * makespan < result.gpu_s_busy <= makespan


def test_goodput_factor_is_finite_where_the_gradient_norm_was_measured_zero() -> None:
    from controller.model.catalog import measured_profile

    measured = measured_profile("deepspeech2")
    assert measured is not None
    # deepspeech2's measured runs have grad_sqr == 0 late in training: an infinite
    # noise ratio, whose limit is perfect efficiency (factor = batch scale).
    late = next(
        row.progress for row in measured.validation[40] if row.grad_sqr == 0 and row.progress > 0
    )
    progress = late / measured.target_progress
    assert measured.noise_scale_at(late, 40) == float("inf")
    spec = JobSpec(
        job_id="d", submit_s=0.0, num_gpus=1, model="deepspeech2", duration_s=10.0, batch_size=20
    )
    assert RateModel(make_cluster()).goodput_factor(spec, 40, progress) == pytest.approx(2.0)


def test_the_timeline_counts_idle_gpus_no_waiting_job_can_use() -> None:
    # Two 3-GPU jobs leave one GPU free on each 4-GPU node; the 4-GPU job waiting
    # behind them can use neither: 2 idle GPUs are unallocatable until one finishes.
    jobs = [
        make_job("a", 3, duration_s=100),
        make_job("b", 3, duration_s=200),
        make_job("c", 4, submit_s=10, duration_s=50),
    ]
    result = _run(jobs, nodes=2)
    by_time = {s.t_s: s for s in result.timeline}
    assert by_time[10.0].gpus_unallocatable == 2
    assert by_time[100.0].gpus_unallocatable == 0  # a finished: c runs on its node
    assert _by_id(result)["c"].first_start_s == pytest.approx(100.0)  # type: ignore[attr-defined]


def test_a_job_off_its_work_batch_pays_its_statistical_efficiency() -> None:
    """A cifar10 job at batch 2048 whose work counts batch-128 steps: each step earns
    its measured gain, well below the 16 of perfect scaling, and the replay takes the
    time its nominal speed (mean of 1/gain over the run) predicts."""
    from controller.model.catalog import measured_profile

    measured = measured_profile("cifar10")
    assert measured is not None
    cluster = make_cluster(nodes=1, gpus=4)
    spec = JobSpec(
        job_id="c",
        submit_s=0.0,
        num_gpus=4,
        model="cifar10",
        iterations=measured.target_progress,
        batch_size=2048,
        work_batch=128,
    )
    rates = RateModel(cluster)
    steps_per_s = rates.rate_ips(spec, next(iter(_placements(cluster, 4))))
    cfg = SimConfig(round_interval_s=60.0)
    result = Simulator(cluster, [spec], make_policy("fifo"), ConsolidatedPlacer(cluster), cfg).run()
    (outcome,) = result.jobs
    assert outcome.finish_s is not None
    perfect_s = measured.target_progress / (16 * steps_per_s)
    assert outcome.finish_s > 1.3 * perfect_s
    assert outcome.finish_s == pytest.approx(
        measured.target_progress / rates.nominal_rate_ips(spec), rel=0.03
    )


def _placements(cluster: object, gpus: int) -> list[object]:
    from controller.placement import packed_allocation

    alloc = packed_allocation(cluster, gpus)  # type: ignore[arg-type]
    assert alloc is not None
    return [alloc]


def test_time_slice_swaps_keep_the_pool_to_the_gpus_nobody_runs_on() -> None:
    """A swap hands the GPUs of the job it suspends straight to the job it resumes
    (controller.sim.runs), past the pool: the free GPUs must still be exactly those
    that no running job holds."""
    cluster = make_cluster(nodes=2, gpus=4)
    jobs = [make_job(f"j{i}", 1 + i % 2, submit_s=i * 5.0, duration_s=900.0) for i in range(16)]
    config = SimConfig(round_interval_s=0.0, check_plans=True)
    sim = Simulator(cluster, jobs, make_policy("gandiva"), ConsolidatedPlacer(cluster), config)
    for t_s in range(0, 6000, 30):
        sim.advance(float(t_s))
        held = [(s.node, s.gpu) for u in sim.running_usage() for s in u.allocation.shares]
        assert len(set(held)) == len(held)
        assert sim.free_gpus == cluster.num_gpus - len(held)
    result = sim.run()
    assert sum(o.preemptions for o in result.jobs) > 10  # jobs were time-sliced
