"""A job's speed on one GPU type where it has run there (issue 31, item 4): the record
both backends keep of each job, by GPU type.

The operator records what a job's own reports say of each type it ran on, in its
DLJob's status (operators/dljobs/type_throughput.py), and hands it to the policies over the
model's speeds; local mode records the simulator's speed of each job on each type it
ran on (controller/live.py `LiveCluster.type_throughput`). The API shows either on the
job page (GET /jobs/{id}: `type_throughput`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TypeThroughput:
    """A job's steps per second on `gpus` whole GPUs of type `gpu_type` at a global
    batch (None: the job names none), as last recorded at `measured_s` (the report's
    arrival on a live cluster; the simulated time in local mode)."""

    gpu_type: str
    steps_per_s: float
    gpus: int
    batch_size: int | None
    measured_s: float

    @property
    def samples_per_s(self) -> float | None:
        return None if self.batch_size is None else self.steps_per_s * self.batch_size
