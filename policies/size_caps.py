"""Size caps: a job's largest size bounded by its model (and global batch).

A policy option, `max_gpus_by`, read by policies.edf and policies.elasticflow: a
mapping from `"model"` or `"model:batch"` to the most GPUs a job of that model (at
that global batch) may run on, below its own `JobSpec.max_gpus`. It states an
evaluation's setting that the trace does not carry: ElasticFlow's simulator
(github.com/pkusys/ElasticFlow, scheduler/jobs.py `add_job`) runs its baselines at
most at the largest size its throughput table profiles (a `nan` cell is a size not
profiled) and its own policy at most at `models.get_max_gpu` (bench/deadlines.py
names both). An empty mapping caps nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.model import JobSpec


def check_caps(caps: Mapping[str, int]) -> None:
    """Refuse a cap below one GPU or a key whose batch is not a whole number, naming it."""
    for key, gpus in caps.items():
        model, _, batch = key.partition(":")
        if not model or (batch and not batch.isdigit()):
            raise ValueError(f"max_gpus_by key {key!r} must be 'model' or 'model:batch'")
        if gpus < 1:
            raise ValueError(f"max_gpus_by[{key!r}] must be >= 1, got {gpus}")


def capped_max_gpus(spec: JobSpec, caps: Mapping[str, int]) -> int:
    """`spec.max_gpus` under the cap of its model and batch (that key first, then the
    model's), never below `spec.min_gpus`."""
    cap = caps.get(f"{spec.model}:{spec.batch_size}", caps.get(spec.model))
    if cap is None:
        return spec.max_gpus
    return max(spec.min_gpus, min(spec.max_gpus, cap))
