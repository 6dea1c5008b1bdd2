"""How much of a job's work one training step does.

A job's work is counted in steps at its work batch (`JobSpec.work_batch`, else its own
batch, else its model's); a step at another batch is worth its statistical gain
(`MeasuredProfile.step_gain`, Pollux §3.1). The simulator credits progress with it
(`controller.rates`), and policies that plan in the job's own steps, as Optimus does,
convert with it, so that both count the same work.
"""

from __future__ import annotations

from controller.model.catalog import measured_profile, resolve
from controller.model.job import JobSpec


def work_batch(spec: JobSpec) -> int:
    """The batch size the job's work is counted in."""
    if spec.work_batch is not None:
        return spec.work_batch
    return spec.batch_size if spec.batch_size is not None else resolve(spec.model).batch_size


def work_per_step(spec: JobSpec, batch_size: int | None, progress: float) -> float:
    """Work-batch steps one step at `batch_size` is worth at `progress` (0..1).

    1 at the work batch; M / M0 (perfect scaling) for a model without measured
    gradient statistics, since nothing tells its efficiency.
    """
    ref = work_batch(spec)
    if batch_size is None or batch_size == ref:
        return 1.0
    measured = measured_profile(resolve(spec.model).measured or "")
    if measured is None:
        return batch_size / ref
    return measured.step_gain(batch_size, ref, progress)
