"""Measured profiles from the Pollux artifact, and the Pollux throughput model fitted to them.

Six applications (bert, cifar10, deepspeech2, imagenet, ncf, yolov3) come with the
measurements published with Pollux (see `profiles/README.md`): `measured_profile`
loads them lazily and fits the Pollux throughput model (Qiao et al., OSDI'21 §3.2):
with K replicas on N nodes at local batch m,

    T_grad(m)   = alpha_grad + beta_grad·m
    T_sync(N,K) = alpha_local + beta_local·(K-1)  if N == 1
                  alpha_node + beta_node·(K-1)    if N > 1
    T_iter      = (T_grad^gamma + T_sync^gamma)^(1/gamma),  T_sync = 0 when K == 1.

The fit, in pure Python: T_grad by least squares on `step_time - sync_time`; then for
each gamma of a golden-section search over [1, 10], the T_sync implied by each multi-GPU
row, `(step^gamma - T_grad^gamma)^(1/gamma)`, fitted by least squares per case (one node or
several); the gamma kept minimises the squared log error of the predicted step time.
Last, the single-node line is refitted on its own rows by that loss
(`_refit_single_node`). The validation files give the gradient statistics behind
statistical efficiency and each application's target progress.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from types import MappingProxyType
from typing import NamedTuple

MEASURED_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


class StepSample(NamedTuple):
    """One measured step: placement size, local batch, step and sync times (T4 testbed)."""

    num_nodes: int
    num_replicas: int
    local_bsz: float
    step_time_s: float
    sync_time_s: float


class ValidationRow(NamedTuple):
    progress: float
    iteration: float
    metric: float
    grad_sqr: float
    grad_var: float


@dataclass(frozen=True, slots=True)
class PolluxFit:
    """Fitted Pollux throughput parameters; times in seconds on the profiling testbed."""

    alpha_grad: float
    beta_grad: float
    alpha_local: float
    beta_local: float
    alpha_node: float
    beta_node: float
    gamma: float

    def grad_s(self, local_bsz: float) -> float:
        return self.alpha_grad + self.beta_grad * local_bsz

    def sync_s(self, num_nodes: int, num_replicas: int) -> float:
        if num_replicas <= 1:
            return 0.0
        if num_nodes <= 1:
            return self.alpha_local + self.beta_local * (num_replicas - 1)
        return self.alpha_node + self.beta_node * (num_replicas - 1)

    def step_s(self, num_nodes: int, num_replicas: int, local_bsz: float) -> float:
        grad = self.grad_s(local_bsz)
        sync = self.sync_s(num_nodes, num_replicas)
        if sync <= 0.0:
            return grad
        g = self.gamma
        return float((grad**g + sync**g) ** (1.0 / g))


@dataclass(frozen=True)
class MeasuredProfile:
    """One Pollux application: its measured steps, the fit, and its validation runs.

    `validation` maps a total batch size to its rows, by progress. Progress is in the
    files' own units (samples processed at the reference batch, as the artifact counts).
    """

    name: str
    samples: tuple[StepSample, ...]
    fit: PolluxFit
    validation: Mapping[int, tuple[ValidationRow, ...]] = field(repr=False)

    @cached_property
    def min_local_bsz(self) -> float:
        """The smallest per-GPU batch measured."""
        return min(s.local_bsz for s in self.samples)

    @property
    def init_batch(self) -> int:
        """The smallest batch validated: the batch progress is counted at."""
        return min(self.validation)

    @cached_property
    def target_progress(self) -> float:
        """The progress at which a job of this application is done.

        The artifact's simulator (`simulator/applications.py`) finishes a job when its
        progress reaches that of its last validated epoch, the least over the runs at
        each batch size (`get_progress(max_epochs)`); its `max_epochs` (bert 2, cifar10
        100, ncf 10, imagenet 90, deepspeech2 80, yolov3 50) are the runs' lengths, but
        for bert, whose third row repeats the second."""
        return min(rows[-1].progress for rows in self.validation.values() if rows)

    def grad_stats_at(self, progress: float, batch_size: int | None = None) -> tuple[float, float]:
        """(grad_sqr, grad_var) at a progress, interpolated linearly along each run and
        clamped at its ends; between the runs at the two measured batches around
        `batch_size`, linearly in the batch, as the artifact's `get_grad_stats`
        (the smallest batch's run when None, the end runs outside the measured span)."""
        batches = sorted(self.validation)
        if batch_size is None or batch_size <= batches[0]:
            return _along(self.validation[batches[0]], progress)
        if batch_size >= batches[-1]:
            return _along(self.validation[batches[-1]], progress)
        upper = next(b for b in batches if b >= batch_size)
        if upper == batch_size:
            return _along(self.validation[upper], progress)
        lower = max(b for b in batches if b < batch_size)
        w = (batch_size - lower) / (upper - lower)
        lo_sqr, lo_var = _along(self.validation[lower], progress)
        hi_sqr, hi_var = _along(self.validation[upper], progress)
        return lo_sqr + w * (hi_sqr - lo_sqr), lo_var + w * (hi_var - lo_var)

    def noise_scale_at(self, progress: float, batch_size: int | None = None) -> float:
        """Gradient noise scale grad_var / grad_sqr (Pollux §3.1's φ/M0 ratio input)."""
        sqr, var = self.grad_stats_at(progress, batch_size)
        return var / sqr if sqr > 0 else math.inf

    def step_gain(self, batch_size: int, work_batch: int, progress: float) -> float:
        """Work-batch steps one step at `batch_size` is worth, at `progress` (0..1 of the
        target).

        Pollux (Qiao et al., OSDI 2021, §3.1): a step at batch M is worth (M / M0) x E(M)
        steps at M0, with E(M) = (phi + M0) / (phi + M) and phi = M0·r, r = grad_var /
        grad_sqr; with s = M / M0 that is s (r + 1) / (r + s), the artifact's
        `(grad_var + grad_sqr) / (grad_var / scale + grad_sqr)`. r is read from the runs
        at M, as the artifact's simulator does. A measured squared gradient norm of
        zero (deepspeech2 late in training) means noise dominates and every sample
        counts (r -> inf: the gain is s).
        """
        scale = batch_size / work_batch
        if scale == 1.0:
            return 1.0
        ratio = self.noise_scale_at(progress * self.target_progress, batch_size)
        if not math.isfinite(ratio):
            return scale
        return scale * (ratio + 1.0) / (ratio + scale)


def _along(rows: Sequence[ValidationRow], progress: float) -> tuple[float, float]:
    """(grad_sqr, grad_var) of one run at a progress, linear between rows, clamped."""
    if progress <= rows[0].progress:
        return rows[0].grad_sqr, rows[0].grad_var
    for lo, hi in itertools.pairwise(rows):
        if progress <= hi.progress:
            if hi.progress == lo.progress:
                return hi.grad_sqr, hi.grad_var
            w = (progress - lo.progress) / (hi.progress - lo.progress)
            return (
                lo.grad_sqr + w * (hi.grad_sqr - lo.grad_sqr),
                lo.grad_var + w * (hi.grad_var - lo.grad_var),
            )
    return rows[-1].grad_sqr, rows[-1].grad_var


@cache
def measured_profile(name: str) -> MeasuredProfile | None:
    """The measured profile of a Pollux application (by catalogue name), or None."""
    if name not in MEASURED_APPS:
        return None
    folder = resources.files("controller.model").joinpath("profiles", name)

    def rows(file: str) -> list[dict[str, str]]:
        return list(csv.DictReader(folder.joinpath(file).read_text().splitlines()))

    samples = [
        StepSample(
            len(r["placement"]),
            sum(int(d) for d in r["placement"]),
            float(r["local_bsz"]),
            float(r["step_time"]),
            float(r["sync_time"]),
        )
        for r in rows("placements.csv")
    ]
    samples += [
        StepSample(
            int(r["num_nodes"]),
            int(r["num_replicas"]),
            float(r["local_bsz"]),
            float(r["step_time"]),
            float(r["sync_time"]),
        )
        for r in rows("scalability.csv")
    ]
    validation: dict[int, tuple[ValidationRow, ...]] = {}
    for entry in folder.iterdir():
        match = re.fullmatch(r"validation-(\d+)\.csv", entry.name)
        if match is not None:
            runs = (
                ValidationRow(*(float(r[k]) for k in ValidationRow._fields))
                for r in rows(entry.name)
            )
            validation[int(match.group(1))] = tuple(sorted(runs))
    return MeasuredProfile(name, tuple(samples), fit_pollux(samples), MappingProxyType(validation))


def fit_pollux(samples: Sequence[StepSample]) -> PolluxFit:
    """Fit the Pollux throughput model to measured steps (see the module docstring)."""
    alpha_grad, beta_grad = _least_squares(
        [s.local_bsz for s in samples],
        [max(s.step_time_s - s.sync_time_s, 1e-9) for s in samples],
        relative=True,
    )
    alpha_grad = max(alpha_grad, 0.0)
    # Per case (one node, several nodes): K - 1, step time and T_grad of each multi-GPU
    # row; and for the loss, every row's (case, K - 1, T_grad, step time).
    groups: dict[bool, tuple[list[float], list[float], list[float]]] = {
        True: ([], [], []),
        False: ([], [], []),
    }
    points: list[tuple[bool, int, float, float]] = []
    for s in samples:
        grad = alpha_grad + beta_grad * s.local_bsz
        points.append((s.num_nodes == 1, s.num_replicas - 1, grad, s.step_time_s))
        if s.num_replicas > 1:
            xs, steps, grads = groups[s.num_nodes == 1]
            xs.append(s.num_replicas - 1)
            steps.append(s.step_time_s)
            grads.append(grad)

    def make(gamma: float) -> tuple[float, PolluxFit]:
        params: dict[bool, tuple[float, float]] = {}
        for single_node, (xs, steps, grads) in groups.items():
            implied = [
                max(st**gamma - g**gamma, 0.0) ** (1.0 / gamma)
                for st, g in zip(steps, grads, strict=True)
            ]
            a, b = _least_squares(xs, implied, relative=False) if xs else (0.0, 0.0)
            params[single_node] = (max(a, 0.0), max(b, 0.0))
        loss = 0.0
        inv = 1.0 / gamma
        for single_node, hops, grad, step in points:
            if hops:
                a, b = params[single_node]
                sync = a + b * hops
                grad = (grad**gamma + sync**gamma) ** inv
            loss += math.log(grad / step) ** 2
        fit = PolluxFit(alpha_grad, beta_grad, *params[True], *params[False], gamma)
        return loss, fit

    # Pollux's range of gamma, [1, 10]; 20 golden-section steps narrow it to 1e-4.
    gamma = _golden(lambda g: make(g)[0], 1.0, 10.0)
    fit = make(gamma)[1]
    return _refit_single_node(fit, [s for s in samples if s.num_nodes == 1 and s.num_replicas > 1])


def _refit_single_node(fit: PolluxFit, rows: Sequence[StepSample]) -> PolluxFit:
    """The single-node sync line refitted on its own rows, by the same loss.

    Some 1,500 multi-node rows decide gamma and T_grad; at them, the least-squares line
    through the single-node rows' implied sync times (a few dozen rows) predicts their
    steps up to 25 % slow (cifar10). Here alpha_local and beta_local minimise the
    squared log error of those rows' predicted steps, at the fit's gamma and T_grad,
    by golden-section search on each (beta nested in alpha) over [0, twice the
    largest measured sync time]; the first fit is kept if it does as well.
    """
    if not rows:
        return fit

    def loss(alpha: float, beta: float) -> float:
        trial = PolluxFit(
            fit.alpha_grad, fit.beta_grad, alpha, beta, fit.alpha_node, fit.beta_node, fit.gamma
        )
        return sum(
            math.log(trial.step_s(1, r.num_replicas, r.local_bsz) / r.step_time_s) ** 2
            for r in rows
        )

    top = 2.0 * max(r.sync_time_s for r in rows) + 1e-6
    spread = top / max(1, max(r.num_replicas for r in rows) - 1)

    def best_beta(alpha: float) -> float:
        return _golden(lambda b: loss(alpha, b), 0.0, spread)

    alpha = _golden(lambda a: loss(a, best_beta(a)), 0.0, top)
    beta = best_beta(alpha)
    if loss(alpha, beta) >= loss(fit.alpha_local, fit.beta_local):
        return fit
    return PolluxFit(
        fit.alpha_grad, fit.beta_grad, alpha, beta, fit.alpha_node, fit.beta_node, fit.gamma
    )


def _golden(f: Callable[[float], float], lo: float, hi: float, steps: int = 20) -> float:
    """Where f is least on [lo, hi], by golden-section search (f taken as unimodal)."""
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - ratio * (hi - lo)
            fc = f(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + ratio * (hi - lo)
            fd = f(d)
    return c if fc < fd else d


def _least_squares(
    xs: Sequence[float], ys: Sequence[float], *, relative: bool
) -> tuple[float, float]:
    """(a, b) minimising Σ w·(a + b·x - y)², w = 1/y² if relative else 1."""
    sw = sx = sy = sxx = sxy = 0.0
    for x, y in zip(xs, ys, strict=True):
        w = 1.0 / (y * y) if relative else 1.0
        sw += w
        sx += w * x
        sy += w * y
        sxx += w * x * x
        sxy += w * x * y
    det = sw * sxx - sx * sx
    if sw == 0.0:
        return 0.0, 0.0
    if abs(det) <= 1e-12 * max(sw * sxx, 1e-300):
        return sy / sw, 0.0
    b = (sw * sxy - sx * sy) / det
    return (sy - b * sx) / sw, b
