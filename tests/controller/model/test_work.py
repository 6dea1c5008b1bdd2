"""Work accounting: statistical gain of a step at another batch, and batch splitting."""

from __future__ import annotations

import pytest

from controller.model import JobSpec
from controller.model.catalog import measured_profile, resolve
from controller.model.perf.work import work_batch, work_per_step


def _cifar(batch: int, work: int | None = 128) -> JobSpec:
    return JobSpec(
        job_id="c",
        submit_s=0.0,
        num_gpus=4,
        model="cifar10",
        iterations=1000.0,
        batch_size=batch,
        work_batch=work,
    )


def test_gain_is_the_artifacts_formula_on_the_run_at_the_jobs_batch() -> None:
    measured = measured_profile("cifar10")
    assert measured is not None
    row = measured.validation[2048][50]  # a measured epoch of the batch-2048 run
    # The artifact: gain = (var + sqr) / (var / scale + sqr), scale = 2048 / 128.
    expected = (row.grad_var + row.grad_sqr) / (row.grad_var / 16 + row.grad_sqr)
    progress = row.progress / measured.target_progress
    assert work_per_step(_cifar(2048), 2048, progress) == pytest.approx(expected, rel=1e-9)
    assert 1.0 < expected < 16.0  # worth more than one small step, less than sixteen


def test_stats_between_two_measured_batches_are_interpolated_in_the_batch() -> None:
    measured = measured_profile("cifar10")
    assert measured is not None
    low, high = measured.validation[2048][0], measured.validation[4096][0]
    sqr, var = measured.grad_stats_at(0.0, 3072)  # half way from 2048 to 4096
    assert sqr == pytest.approx((low.grad_sqr + high.grad_sqr) / 2)
    assert var == pytest.approx((low.grad_var + high.grad_var) / 2)


def test_the_work_batch_defaults_to_the_jobs_batch_and_earns_one() -> None:
    spec = _cifar(512, work=None)
    assert work_batch(spec) == 512
    assert work_per_step(spec, 512, 0.3) == 1.0
    # A model without gradient statistics is taken as perfectly efficient.
    plain = JobSpec(
        job_id="r", submit_s=0.0, num_gpus=1, model="resnet50", iterations=10.0, batch_size=64
    )
    assert resolve("resnet50").measured is None
    assert work_per_step(plain, 256, 0.5) == 4.0
