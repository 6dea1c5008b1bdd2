import numpy as np
import pytest

from controller.model.job import JobSpec
from controller.traces.formats.synthetic import DEFAULT_MODELS, MAX_RUN_S, MIN_RUN_S, generate


def offered_load(jobs: list[JobSpec], cluster_gpus: int) -> float:
    """GPU-seconds asked per second of arrivals, over the cluster's GPUs."""
    work = sum(job.num_gpus * (job.duration_s or 0.0) for job in jobs)
    return work / (jobs[-1].submit_s * cluster_gpus)


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    first = generate(500, seed=7, cluster_gpus=64)
    assert first == generate(500, seed=7, cluster_gpus=64)
    assert first != generate(500, seed=8, cluster_gpus=64)
    assert generate(500, seed=7, cluster_gpus=64, arrival="diurnal") == generate(
        500, seed=7, cluster_gpus=64, arrival="diurnal"
    )


@pytest.mark.parametrize("load", [0.5, 0.9, 1.3])
def test_offered_load_is_close_to_the_target(load: float) -> None:
    jobs = generate(20_000, seed=1, cluster_gpus=128, load=load)
    assert offered_load(jobs, 128) == pytest.approx(load, rel=0.10)


def test_jobs_look_like_philly() -> None:
    jobs = generate(20_000, seed=2, cluster_gpus=64)
    gpus = np.array([job.num_gpus for job in jobs])
    run_s = np.array([job.duration_s for job in jobs])
    assert 0.65 < np.mean(gpus == 1) < 0.75
    assert set(np.unique(gpus)) == {1, 2, 4, 8, 16, 32}
    assert 0.0 < np.mean(gpus >= 16) < 0.04
    assert 15 * 60 < np.median(run_s) < 60 * 60
    assert run_s.min() >= MIN_RUN_S and run_s.max() <= MAX_RUN_S
    assert np.mean(run_s > 86400) > 0.005  # a tail of jobs longer than a day
    assert {job.model for job in jobs} == set(DEFAULT_MODELS)
    tenants = [job.tenant for job in jobs]
    assert tenants.count("tenant-0") > tenants.count("tenant-1") > tenants.count("tenant-3") > 0


def test_jobs_arrive_in_order_from_zero_with_unique_ids() -> None:
    jobs = generate(1000, seed=3, cluster_gpus=8)
    submits = [job.submit_s for job in jobs]
    assert submits[0] == 0.0 and submits == sorted(submits)
    assert len({job.job_id for job in jobs}) == 1000
    assert jobs[0].job_id == "job-000"
    assert max(job.num_gpus for job in jobs) <= 8


def test_diurnal_arrivals_peak_at_noon_and_keep_the_load() -> None:
    jobs = generate(20_000, seed=4, cluster_gpus=64, arrival="diurnal")
    hours = np.array([job.submit_s for job in jobs]) % 86400 / 3600
    midday = np.mean((hours >= 9) & (hours < 15))
    night = np.mean((hours < 3) | (hours >= 21))
    assert midday > 2 * night
    assert offered_load(jobs, 64) == pytest.approx(0.9, rel=0.15)


def test_custom_models_and_empty_workload() -> None:
    jobs = generate(50, seed=5, cluster_gpus=4, models=("a", "b"))
    assert {job.model for job in jobs} <= {"a", "b"}
    assert generate(0, seed=5, cluster_gpus=4) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cluster_gpus": 0},
        {"load": 0.0},
        {"arrival": "bursty"},
        {"models": ()},
        {"num_tenants": 0},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object]) -> None:
    arguments: dict[str, object] = {"cluster_gpus": 8} | kwargs
    with pytest.raises(ValueError):
        generate(10, seed=0, **arguments)  # type: ignore[arg-type]
