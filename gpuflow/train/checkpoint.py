"""Atomic save and load of a training job's state: what a restart needs to continue.

Called by `driver.Session`: on SIGTERM, every `checkpoint_interval_s`, at the end,
and once at start to resume. GPUFLOW_CHECKPOINT_PATH names a directory (the DLJob's
`spec.checkpoint.path`, usually on a shared volume); the state is the one file
CHECKPOINT_FILE in it, written to a temporary file in the same directory, fsynced,
then renamed over the old one with os.replace, so a reader (or a SIGKILL mid-write)
sees either the previous checkpoint or the new one, never a torn file. With DDP only
rank 0 writes; every rank reads the same file.

The RNG states saved are rank 0's (python, numpy when installed, torch, and CUDA's
when available); they are restored on rank 0 only, and the other ranks keep the
seeding the script gives them (the example derives its data from seed, step and rank,
so no stream depends on restored RNG state).
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "gpuflow-checkpoint.pt"
# Bumped when the layout below changes incompatibly; a checkpoint of another format is
# refused rather than half-loaded.
FORMAT = 1


@dataclass
class TrainState:
    """The non-tensor progress of a job, saved next to the model and optimiser."""

    step: int = 0  # the next step to run
    samples_seen: int = 0  # global samples consumed: the data position
    batch_size: int = 0  # global batch in use
    base_batch: int = 0  # the batch the script's learning rates are for
    base_lrs: list[float] = field(default_factory=list)  # per optimiser param group
    noise: dict[str, float] = field(default_factory=dict)  # gradstats.NoiseState
    extra: dict[str, Any] = field(default_factory=dict)  # the script's own


def checkpoint_file(directory: Path) -> Path:
    return directory / CHECKPOINT_FILE


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np  # optional: numpy is not required by a training script
    except ImportError:
        return state
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    # As lists, so that torch.load(weights_only=True) reads them back.
    state["numpy"] = (name, np.asarray(keys).tolist(), pos, has_gauss, cached)
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            return
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def save(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
) -> Path:
    """Write the checkpoint atomically; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "train": {
            "step": state.step,
            "samples_seen": state.samples_seen,
            "batch_size": state.batch_size,
            "base_batch": state.base_batch,
            "base_lrs": list(state.base_lrs),
            "noise": dict(state.noise),
            "extra": state.extra,
        },
        "rng": _rng_state(),
    }
    target = checkpoint_file(directory)
    fd, tmp = tempfile.mkstemp(prefix=f".{CHECKPOINT_FILE}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename is durable only once the directory entry is.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    log.info("checkpoint at step %d written to %s", state.step, target)
    return target


def load(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    restore_rng: bool,
) -> TrainState | None:
    """Load the checkpoint into `model` and `optimizer` when there is one; None
    otherwise. A file of another format is an error, not a fresh start."""
    path = checkpoint_file(directory)
    if not path.exists():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {payload.get('format')!r}, expected {FORMAT}")
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    if restore_rng:
        _set_rng_state(payload["rng"])
    t = payload["train"]
    log.info("resumed from %s at step %d", path, t["step"])
    return TrainState(
        step=int(t["step"]),
        samples_seen=int(t["samples_seen"]),
        batch_size=int(t["batch_size"]),
        base_batch=int(t["base_batch"]),
        base_lrs=[float(x) for x in t["base_lrs"]],
        noise={k: float(v) for k, v in t["noise"].items()},
        extra=dict(t["extra"]),
    )
