"""Hand-built JobViews for benchmarks that time one policy round on a made-up snapshot.

Used by bench/pollux.py and bench/policy_scale.py (run with the project root on
PYTHONPATH, as their docstrings say).
"""

from __future__ import annotations

from controller.model import Allocation, JobSpec, JobStatus, JobView


def job_view(
    spec: JobSpec, status: JobStatus, alloc: Allocation | None, now: float, progress: float
) -> JobView:
    """`spec` `progress` (0..1) of the way through, running on `alloc` at 1 iteration a
    second or waiting, restarted once, an hour of service per unit of progress."""
    total = spec.iterations or 1.0
    return JobView(
        job_id=spec.job_id,
        spec=spec,
        status=status,
        allocation=alloc,
        mark_s=now,
        attained_gpu_s=progress * 3600.0,
        executed_s=progress * 3600.0,
        done_iters=progress * total,
        total_iters=total,
        rate_ips=1.0 if status is JobStatus.RUNNING else 0.0,
        resume_s=now,
        nominal_rate_ips=1.0,
        first_start_s=0.0,
        restarts=1,
        batch_size=spec.batch_size,
    )
