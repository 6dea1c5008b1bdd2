"""`model_view`, the simulator's cheap JobView, against the dataclass constructor."""

from __future__ import annotations

import dataclasses

import pytest

from controller.model import Allocation, JobStatus, JobView
from controller.model.job import model_view
from tests.builders import make_job


@pytest.mark.parametrize("status", list(JobStatus))
def test_model_view_equals_the_constructor_field_by_field(status: JobStatus) -> None:
    spec = make_job("j7", 2)
    alloc = Allocation.whole([(0, 1), (0, 3)]) if status is JobStatus.RUNNING else None
    values = (spec, status, alloc, 12.5, 30.0, 15.0, 7.0, 99.0, 0.5, 13.0, 0.25, 1.0, 2.0, 3, 64)
    built = JobView(
        job_id=spec.job_id,
        spec=spec,
        status=status,
        allocation=alloc,
        mark_s=12.5,
        attained_gpu_s=30.0,
        executed_s=15.0,
        done_iters=7.0,
        total_iters=99.0,
        rate_ips=0.5,
        resume_s=13.0,
        nominal_rate_ips=0.25,
        first_start_s=1.0,
        waiting_since_s=2.0,
        restarts=3,
        batch_size=64,
    )
    fast = model_view(*values)
    # Every field, so that a field added to JobView and not to model_view fails here.
    for f in dataclasses.fields(JobView):
        assert getattr(fast, f.name) == getattr(built, f.name), f.name
    assert fast == built
    assert hash(fast) == hash(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.mark_s = 0.0  # type: ignore[misc]
