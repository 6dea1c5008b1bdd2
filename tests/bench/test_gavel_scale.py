"""bench/gavel_scale.py at a small size: the workload as Gavel's simulator draws it, and a
replay and an LP timing that run to the end (issue 31)."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
from pathlib import Path

import pytest

from bench.gavel_scale import job_types, main, workload

ROOT = Path(__file__).resolve().parents[2]
# Gavel's single-job entries, shipped with gpuflow (the bench reads the full file).
MATRIX = ROOT / "controller/model/profiles/gavel/throughputs.json"


def test_the_workload_is_gavels_job_types_scale_factors_and_poisson_arrivals() -> None:
    jobs = workload(2000, 3, 600.0, 1 / 20, MATRIX)
    assert jobs == workload(2000, 3, 600.0, 1 / 20, MATRIX)
    types = job_types(MATRIX)
    for job in jobs:
        name = job.model if job.batch_size is None else f"{job.model} (batch size {job.batch_size})"
        assert job.num_gpus in types[name] and job.iterations is not None and job.iterations > 0
    gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(jobs)]
    # Exponential gaps of mean 3600 / 600 = 6 s: their mean and their median (ln 2 x 6).
    assert statistics.mean(gaps) == pytest.approx(6.0, rel=0.1)
    assert statistics.median(gaps) == pytest.approx(6.0 * 0.693, rel=0.15)
    # 70 % single-GPU jobs, more where a type was measured on one GPU only.
    single = sum(j.num_gpus == 1 for j in jobs) / len(jobs)
    assert 0.7 <= single <= 0.85


def test_a_small_replay_and_the_lp_timing_run_to_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(MATRIX, tmp_path / "simulation_throughputs.json")
    cluster = ROOT / "examples/clusters/gavel-8-16-24.yaml"
    data = ["--data", str(tmp_path), "--cluster", str(cluster), "--duration-scale", "0.005"]
    assert main([*data, "--jobs", "40", "--rate-per-h", "20", "--pop-k", "2"]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert replay["finished"] == replay["jobs"] == 40 and replay["gpus"] == 48
    assert replay["round_max_s"] >= replay["round_median_s"] > 0.0
    assert main([*data, "--lp-times", "--sizes", "30"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["pop_k"] for r in rows] == [1]
    assert 0.0 < rows[0]["least_speed"] <= rows[0]["mean_speed"] <= 1.0
