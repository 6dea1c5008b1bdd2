"""Atomic save and load of a training job's state: what a restart needs to continue.

Called by `driver.Session`: on SIGTERM, every `checkpoint_interval_s`, at the end,
and once at start to resume. GPUFLOW_CHECKPOINT_PATH names a directory (the DLJob's
`spec.checkpoint.path`, usually on a shared volume). Each attempt of the job
(GPUFLOW_ATTEMPT) writes its own sub-directory, `attempt-<n>/CHECKPOINT_FILE`: an old
attempt still writing its SIGTERM checkpoint after a new one started (a late writer)
writes its own directory and can never replace a newer attempt's checkpoint. A file is
written to a temporary file in the same directory, fsynced, then renamed over the old
one with os.replace, so a reader (or a SIGKILL mid-write) sees either the previous
checkpoint or the new one, never a torn file. An attempt resumes from the newest
complete checkpoint: that of the highest attempt up to its own that has one (a file
CHECKPOINT_FILE directly in the directory, the layout before attempts, counts as
attempt 0). Once an attempt has written its own, the directories of the attempts
before it are removed (`prune`). With DDP only rank 0 writes; every rank reads the
same file.

The RNG states saved are rank 0's (python, numpy when installed, torch, and CUDA's
when available); they are restored on rank 0 only, and the other ranks keep the
seeding the script gives them (the example derives its data from seed, step and rank,
so no stream depends on restored RNG state).
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import tempfile
import time
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


ATTEMPT_DIR = re.compile(r"attempt-([1-9][0-9]*)")


def attempt_dir(directory: Path, attempt: int) -> Path:
    """Where attempt `attempt` (GPUFLOW_ATTEMPT, from 1) writes its checkpoint."""
    return directory / f"attempt-{attempt}"


def checkpoint_file(directory: Path, attempt: int) -> Path:
    return attempt_dir(directory, attempt) / CHECKPOINT_FILE


def _attempts(directory: Path) -> list[int]:
    """The attempts that have a directory under `directory`, ascending."""
    if not directory.is_dir():
        return []
    found = (ATTEMPT_DIR.fullmatch(p.name) for p in directory.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def newest(directory: Path, attempt: int) -> tuple[int, Path] | None:
    """The newest complete checkpoint an attempt may resume from, with the attempt that
    wrote it: the highest attempt <= `attempt` whose file exists (renamed into place,
    so complete); 0 for a file of the layout before attempts. None if there is none."""
    for n in reversed(_attempts(directory)):
        path = checkpoint_file(directory, n)
        if n <= attempt and path.is_file():
            return n, path
    legacy = directory / CHECKPOINT_FILE
    return (0, legacy) if legacy.is_file() else None


def prune(directory: Path, attempt: int) -> list[int]:
    """Remove the checkpoints of the attempts before `attempt` (and the legacy file),
    once `attempt` has written its own; returns the attempts removed. A late writer
    whose directory goes mid-write fails or writes a directory of an older attempt,
    which a resume never prefers to a newer one."""
    if not checkpoint_file(directory, attempt).is_file():
        return []
    removed = [n for n in _attempts(directory) if n < attempt]
    for n in removed:
        shutil.rmtree(attempt_dir(directory, n), ignore_errors=True)
    (directory / CHECKPOINT_FILE).unlink(missing_ok=True)
    return removed


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
    *,
    attempt: int,
    write_s: float = 0.0,
) -> Path:
    """Write attempt `attempt`'s checkpoint atomically; returns its path. `write_s`:
    the write takes at least this long, the rename coming last (a large model's
    write, to try a grace period against; 0 in a real job)."""
    started = time.monotonic()
    target = checkpoint_file(directory, attempt)
    target.parent.mkdir(parents=True, exist_ok=True)
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
    fd, tmp = tempfile.mkstemp(prefix=f".{CHECKPOINT_FILE}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        time.sleep(max(0.0, write_s - (time.monotonic() - started)))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # The rename is durable only once the directory entry is.
    dir_fd = os.open(target.parent, os.O_RDONLY)
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
    attempt: int,
    restore_rng: bool,
) -> TrainState | None:
    """Load the newest checkpoint attempt `attempt` may resume from (`newest`) into
    `model` and `optimizer`; None if there is none. A file of another format is an
    error, not a fresh start."""
    found = newest(directory, attempt)
    if found is None:
        return None
    path = found[1]
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
