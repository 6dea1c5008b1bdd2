"""gpuflow.train: the library a training job imports to run under gpuflow.

It reads the placement the operator injects (placement), reports metrics to the API
(reporter), estimates Pollux's gradient statistics (gradstats), checkpoints atomically
(checkpoint), stops on SIGTERM with EXIT_CHECKPOINTED (preemption), adopts a new batch
size between steps (batch), and drives a DDP loop (driver: `session()`). See docs/train.md.

The torch parts (driver, checkpoint, distributed) load on first use, so the rest
imports without torch. A training image installs this package alone, with torch and
httpx, as the `gpuflow-train` distribution (`pip install packaging/gpuflow-train`).
Nothing here imports the operator, the API service, kubernetes or a database: a job
talks to gpuflow only through its env, its podinfo file and the API over HTTP.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpuflow.train.batch import ANN_BATCH_SIZE, BatchWatcher, scaled_lr, split_batch
from gpuflow.train.gradstats import NoiseEstimate, NoiseState, estimate, smooth
from gpuflow.train.placement import Placement, PlacementError, ReportTarget, read_placement
from gpuflow.train.preemption import EXIT_CHECKPOINTED, StopFlag
from gpuflow.train.reporter import Reporter

if TYPE_CHECKING:  # the torch-backed names, resolved lazily below
    from gpuflow.train.driver import Session, session

__all__ = [
    "ANN_BATCH_SIZE",
    "EXIT_CHECKPOINTED",
    "BatchWatcher",
    "NoiseEstimate",
    "NoiseState",
    "Placement",
    "PlacementError",
    "ReportTarget",
    "Reporter",
    "Session",
    "StopFlag",
    "estimate",
    "read_placement",
    "scaled_lr",
    "session",
    "smooth",
    "split_batch",
]

_TORCH_NAMES = {"Session", "session"}


def __getattr__(name: str) -> Any:
    """`session` and `Session` import torch; load them only when asked for."""
    if name in _TORCH_NAMES:
        return getattr(importlib.import_module("gpuflow.train.driver"), name)
    raise AttributeError(f"module 'gpuflow.train' has no attribute {name!r}")
