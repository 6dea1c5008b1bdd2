"""A job's metric reports, summarised as its DLJob's `status.train`.

A pure function of the job's latest report rows: `api.cluster_mode.train_status` (cluster mode's
background writer) reads them with `latest_samples` and writes `summarise`'s result
into the DLJob's status; the operator reads it back (operators/views.py
`measured_of`) as the policies' `Measured`. The shape is a contract with that reader:

    {"reportedAt": RFC 3339 with microseconds (the last report's arrival),
     "step": the last step reported, "batchSize", "gpus": the size then,
     "samplesPerSecond": the latest window's global samples/s,
     "throughput": [{"gpus", "batchSize", "samplesPerSecond", "steps"}, ...],
     "loss": [[step, value], ...], "gradSqr", "gradVar", "epochSteps"}

A field whose metric was never reported is absent. Report names (gpuflow.train's
reporter, a contract too): loss, samples_per_s, step_time_s, batch_size, gpus,
grad_sqr, grad_var, and optionally epoch_steps. Steps are the job's own; after a
restart from a checkpoint they may repeat, and the latest report of a step wins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from operators.kube.times import micro_time

LOSS, SAMPLES_PER_S, STEP_TIME_S = "loss", "samples_per_s", "step_time_s"
BATCH_SIZE, GPUS, GRAD_SQR, GRAD_VAR = "batch_size", "gpus", "grad_sqr", "grad_var"
EPOCH_STEPS = "epoch_steps"
NAMES = (LOSS, SAMPLES_PER_S, STEP_TIME_S, BATCH_SIZE, GPUS, GRAD_SQR, GRAD_VAR, EPOCH_STEPS)

LOSS_POINTS = 64  # the loss tail Optimus fits (its paper refits on every new point)
THROUGHPUT_SIZES = 16  # (gpus, batch) sizes kept, the most recently run first
WINDOWS_PER_SIZE = 8  # the last windows averaged at each size: a few noisy windows
# Rows read per name: enough windows to cover THROUGHPUT_SIZES sizes at
# WINDOWS_PER_SIZE each twice over, and the loss tail with room for repeated steps.
ROWS_PER_NAME = 2 * THROUGHPUT_SIZES * WINDOWS_PER_SIZE


@dataclass(frozen=True, slots=True)
class Sample:
    """One reported figure: `seq` orders reports as they arrived (the row id)."""

    seq: int
    name: str
    value: float
    step: int | None
    at_s: float  # arrival, seconds since the epoch


@dataclass
class _Size:
    windows: list[tuple[float, int]]  # (samples/s, steps covered), oldest first
    last_seq: int


def summarise(samples: Iterable[Sample]) -> dict[str, Any]:
    """The `status.train` summary of a job's reports ({} when there are none)."""
    rows = sorted((s for s in samples if math.isfinite(s.value)), key=lambda s: s.seq)
    if not rows:
        return {}
    by_name: dict[str, list[Sample]] = {}
    for s in rows:
        by_name.setdefault(s.name, []).append(s)
    out: dict[str, Any] = {"reportedAt": micro_time(max(s.at_s for s in rows))}
    steps = [s for s in rows if s.step is not None]
    if steps:
        out["step"] = steps[-1].step
    for name, key, kind in (
        (BATCH_SIZE, "batchSize", int),
        (GPUS, "gpus", int),
        (SAMPLES_PER_S, "samplesPerSecond", float),
        (GRAD_SQR, "gradSqr", float),
        (GRAD_VAR, "gradVar", float),
        (EPOCH_STEPS, "epochSteps", int),
    ):
        if name in by_name:
            out[key] = kind(by_name[name][-1].value)
    throughput = _throughput(rows)
    if throughput:
        out["throughput"] = throughput
    loss = _loss_tail(by_name.get(LOSS, []))
    if loss:
        out["loss"] = loss
    return out


def _loss_tail(losses: Sequence[Sample]) -> list[list[float | int]]:
    """The last LOSS_POINTS distinct steps' losses in step order; of a step reported
    twice (a restart went back to a checkpoint) the later report."""
    by_step: dict[int, float] = {}
    for s in losses:  # arrival order: a later report of a step replaces the earlier
        if s.step is not None:
            by_step.pop(s.step, None)
            by_step[s.step] = s.value
    recent = list(by_step.items())[-LOSS_POINTS:]
    return [[step, value] for step, value in sorted(recent)]


def _throughput(rows: Sequence[Sample]) -> list[dict[str, Any]]:
    """Per (gpus, batch size): the mean samples/s of its last WINDOWS_PER_SIZE windows
    and the steps they cover, for the THROUGHPUT_SIZES sizes run most recently, sorted
    by size. A window's size is the one reported at its step, else the last reported
    before it; a window covers the steps since the window before it (one step for
    the first read, or after a restart went back). Windows of unknown size are left
    out."""
    at_step: dict[str, dict[int, int]] = {BATCH_SIZE: {}, GPUS: {}}
    for s in rows:
        if s.name in at_step and s.step is not None:
            at_step[s.name][s.step] = int(s.value)
    current: dict[str, int | None] = {BATCH_SIZE: None, GPUS: None}
    sizes: dict[tuple[int, int], _Size] = {}
    prev_step: int | None = None
    for s in rows:
        if s.name in current:
            current[s.name] = int(s.value)
            continue
        if s.name != SAMPLES_PER_S or s.step is None:
            continue
        gpus = at_step[GPUS].get(s.step, current[GPUS])
        batch = at_step[BATCH_SIZE].get(s.step, current[BATCH_SIZE])
        covered = s.step - prev_step if prev_step is not None and s.step > prev_step else 1
        prev_step = s.step
        if gpus is None or batch is None:
            continue
        size = sizes.setdefault((gpus, batch), _Size([], s.seq))
        size.windows.append((s.value, covered))
        size.last_seq = s.seq
    recent = sorted(sizes.items(), key=lambda kv: kv[1].last_seq)[-THROUGHPUT_SIZES:]
    out = []
    for (gpus, batch), size in sorted(recent):
        last = size.windows[-WINDOWS_PER_SIZE:]
        mean = sum(v for v, _ in last) / len(last)
        steps = sum(n for _, n in last)
        out.append({"gpus": gpus, "batchSize": batch, "samplesPerSecond": mean, "steps": steps})
    return out
