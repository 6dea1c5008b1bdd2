"""Optimus' online models: the loss curve (§3.1), the speed function (§3.2), and the
loss a replayed job reports.

Peng et al., "Optimus: An Efficient Dynamic Resource Scheduler for Deep Learning
Clusters", EuroSys 2018. `policies.optimus` calls these once a round for the jobs whose
samples changed; nothing here keeps state (the samples live in the policy's state).

Loss curve, §3.1 Eq. (1), in epochs e = k / iters_per_epoch:

    l(e) = 1 / (β0·e + β1) + β2,   β0, β1, β2 ≥ 0

fitted by non-negative least squares on the linearised form: for a fixed β2,
1/(l - β2) = β0·e + β1 is linear, solved as a two-variable NNLS in closed form (the
active sets enumerated: the same answer as `scipy.optimize.nnls`, checked by a test,
without its per-call cost), rows weighted by (l - β2)² so that the residual is about
the residual in loss units; β2 is searched on a grid over [0, min observed loss),
refined once around the best point, keeping the β2 with the least squared error of
the loss itself. Why not `scipy.optimize.least_squares` with bounds: it needs a
starting point, may stop in a local minimum, and costs milliseconds a fit; the
linearised NNLS is convex for each β2, deterministic, and ~100 µs a fit.

Convergence (the paper's criterion: training stops when the loss decreases by less
than a threshold δ between consecutive epochs): -dl/de = β0 / (β0·e + β1)² < δ, so

    e* = (sqrt(β0 / δ) - β1) / β0      (0 when β0 = 0: a flat curve has converged)

and the remaining iterations are e*·iters_per_epoch - done.

Speed function, §3.2 Eq. (3) (synchronous training with parameter servers,
f(p, w) = (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)^-1) adapted to all-reduce with w GPU
workers on n = ceil(w / GPUs per node) servers and no parameter servers:

    f(w)^-1 = θ0·M/w + θ1 + θ2·2(w-1)/w + θ3·2(n-1)/n,   θ ≥ 0

the compute of the local batch M/w, a fixed per-iteration cost, and the traffic of a
ring all-reduce per GPU inside a server and across servers (which replace the paper's
worker-to-PS terms); linear in θ, fitted by `scipy.optimize.nnls` on the iteration
times 1/f. With one sample size the measured speed is used as is.

Observed loss (`synthetic_loss`): the replay has no losses, so each job gets a
ground-truth curve of the form above, with seeded shape, scale and noise keyed by its
id, built so that the convergence criterion with threshold `CONVERGENCE_THRESHOLD`
fires exactly at its true total iterations (a perfect fit recovers the oracle). It is
sampled at the iterations the job has done, never beyond. It stands in for the losses
a live job reports: `reported_loss` reads those (`JobView.measured`, from the job's
gpuflow.train reports) and falls back to the synthetic curve for a job that reports no
loss or not the length of its epoch.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy.optimize import nnls

from controller.model import JobView

# δ: the fitted loss must fall by less than this per epoch for the job to have
# converged. gpuflow's choice, in loss units: the authors' artifact stops at less than
# 0.05 over 10 epochs (github.com/pengyanghua/optimus, scheduler/params.py,
# LOSS_CONVERGENCE and LOSS_LITTLE_CHANGE_EPOCH_NUM), 0.005 an epoch; the synthetic
# curves below use a smaller δ so that they keep descending for 30 to 400 epochs.
CONVERGENCE_THRESHOLD = 1e-3

# Grid of β2 candidates per fit, and of the refinement around the best one, as
# fractions of the span searched.
_BETA2_GRID = np.linspace(0.0, 1.0, 32)
_BETA2_REFINE = np.linspace(-1.0, 1.0, 17) / (len(_BETA2_GRID) - 1)


class LossCurve(NamedTuple):
    """l(e) = 1/(beta0·e + beta1) + beta2, e in epochs."""

    beta0: float
    beta1: float
    beta2: float

    def loss(self, epoch: float) -> float:
        return 1.0 / (self.beta0 * epoch + self.beta1) + self.beta2

    def converged_epoch(self, threshold: float = CONVERGENCE_THRESHOLD) -> float:
        """First epoch at which the loss falls by less than `threshold` an epoch."""
        if self.beta0 <= 0.0:
            return 0.0
        return max(0.0, (math.sqrt(self.beta0 / threshold) - self.beta1) / self.beta0)


class LossReport(NamedTuple):
    """One loss a job reports: at `iteration` (≤ its iterations done), and the length
    of its epoch in iterations (dataset size / batch size, which a job knows)."""

    iteration: float
    loss: float
    iters_per_epoch: float


# What the policy calls for a running job's loss now; None when it has none to report.
LossSource = Callable[[JobView, float], LossReport | None]


def fit_loss_curve(epochs: Sequence[float], losses: Sequence[float]) -> LossCurve | None:
    """The NNLS fit of Eq. (1) to (epoch, loss) samples; None with fewer than 3."""
    if len(epochs) < 3:
        return None
    e = np.asarray(epochs, dtype=float)
    loss = np.asarray(losses, dtype=float)
    top = float(loss.min()) * (1.0 - 1e-6)
    if top <= 0.0:
        return None
    best = _best_on_grid(e, loss, top * _BETA2_GRID)
    refine = np.minimum(np.maximum(best.beta2 + top * _BETA2_REFINE, 0.0), top)
    return _best_on_grid(e, loss, refine)


def _best_on_grid(e: np.ndarray, loss: np.ndarray, beta2: np.ndarray) -> LossCurve:
    gap = loss[None, :] - beta2[:, None]  # (G, n), > 0
    # Rows z = 1/gap weighted by gap²: the weighted sums simplify (w·z = gap, w·z² = 1).
    w = gap * gap
    e2 = e * e
    b0, b1 = nnls2(w.sum(axis=1), w @ e, w @ e2, gap.sum(axis=1), gap @ e, float(e.size))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pred = 1.0 / (b0[:, None] * e[None, :] + b1[:, None]) + beta2[:, None]
        sse = ((pred - loss[None, :]) ** 2).sum(axis=1)
    sse[~np.isfinite(sse)] = np.inf
    i = int(np.argmin(sse))
    return LossCurve(float(b0[i]), float(b1[i]), float(beta2[i]))


def nnls2(
    sw: np.ndarray,
    sx: np.ndarray,
    sxx: np.ndarray,
    sz: np.ndarray,
    sxz: np.ndarray,
    szz: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted NNLS of z ≈ a·x + b (a, b ≥ 0) from its weighted sums (Σw, Σwx, Σwx²,
    Σwz, Σwxz, Σwz²), one problem per element.

    Minimises Σ w·(a·x + b - z)²: the unconstrained solution where it is feasible,
    else the better of the two one-variable solutions (a = 0 or b = 0), clipped at 0.
    """
    det = sw * sxx - sx * sx
    ok = det > 0
    safe = np.where(ok, det, 1.0)
    a = np.where(ok, (sw * sxz - sx * sz) / safe, -1.0)
    b = (sz - a * sx) / sw
    b_only = np.maximum(0.0, sz / sw)  # a = 0
    a_only = np.maximum(0.0, sxz / np.where(sxx > 0, sxx, np.inf))  # b = 0
    err_b = szz - 2 * b_only * sz + b_only**2 * sw
    err_a = szz - 2 * a_only * sxz + a_only**2 * sxx
    feasible = ok & (a >= 0) & (b >= 0)
    use_b = err_b <= err_a
    a_out = np.where(feasible, a, np.where(use_b, 0.0, a_only))
    b_out = np.where(feasible, b, np.where(use_b, b_only, 0.0))
    return a_out, b_out


# -- speed function ---------------------------------------------------------------


def speed_features(num_gpus: np.ndarray, batch: float, gpus_per_node: int) -> np.ndarray:
    """Rows [M/w, 1, 2(w-1)/w, 2(n-1)/n] of the all-reduce form of Eq. (3)."""
    w = num_gpus.astype(float)
    n = np.ceil(w / gpus_per_node)
    return np.stack([batch / w, np.ones_like(w), 2 * (w - 1) / w, 2 * (n - 1) / n], axis=1)


def fit_speed(
    samples: Sequence[tuple[int, float]], batch: float, gpus_per_node: int
) -> tuple[float, ...] | None:
    """θ by NNLS on iteration times 1/f; None with fewer than two sizes sampled."""
    if len(samples) < 2:
        return None
    w = np.array([s[0] for s in samples])
    times = np.array([1.0 / s[1] for s in samples])
    theta, _ = nnls(speed_features(w, batch, gpus_per_node), times)
    return tuple(float(t) for t in theta)


def predict_speed(
    theta: tuple[float, ...], num_gpus: np.ndarray, batch: float, gpus_per_node: int
) -> np.ndarray:
    """Iterations per second f(w) of the fitted model (inf where it predicts no time)."""
    times = speed_features(num_gpus, batch, gpus_per_node) @ np.asarray(theta)
    return np.where(times > 0, 1.0 / np.maximum(times, 1e-300), math.inf)


# -- the replay's observed loss ---------------------------------------------------

# Ground-truth shape, drawn per job: x = β0·K/β1, how far down its curve a job is when
# it converges (5: still bending; 30: long flat tail), and the initial excess loss
# 1/β1 over the floor β2. Absolute noise on each reported loss. gpuflow's choices: they
# give 30 to 400 epochs at δ = CONVERGENCE_THRESHOLD, as the paper's jobs run tens to
# hundreds of epochs (§2.1).
_SHAPE_RANGE = (5.0, 30.0)
_EXCESS_RANGE = (1.0, 3.0)
_FLOOR_RANGE = (0.05, 1.0)
LOSS_NOISE = 0.01


def true_loss_curve(
    job_id: str, total_iters: float, threshold: float = CONVERGENCE_THRESHOLD
) -> tuple[LossCurve, float]:
    """A job's ground-truth curve (in epochs) and its epoch length in iterations.

    With x and g drawn from the job id, the job runs E = g·x / (δ·(1+x)²) epochs and
    β1 = 1/g, β0 = x·β1/E: then -dl/de = δ exactly at e = E, i.e. at total_iters.
    """
    rng = random.Random(f"optimus-loss/{job_id}")
    x = rng.uniform(*_SHAPE_RANGE)
    g = rng.uniform(*_EXCESS_RANGE)
    floor = rng.uniform(*_FLOOR_RANGE)
    epochs = g * x / (threshold * (1.0 + x) ** 2)
    beta1 = 1.0 / g
    return LossCurve(x * beta1 / epochs, beta1, floor), total_iters / epochs


def reported_loss(job: JobView, now_s: float) -> LossReport | None:
    """The last loss the job reported, at its own step (live jobs count progress in
    their steps once they report); the synthetic curve when it reports none, or not
    how many steps its epoch has (the threshold is a loss drop per epoch)."""
    measured = job.measured
    if measured is None or not measured.losses or not measured.epoch_steps:
        return synthetic_loss(job, now_s)
    step, loss = measured.losses[-1]
    return LossReport(float(step), loss, float(measured.epoch_steps))


def synthetic_loss(job: JobView, now_s: float) -> LossReport | None:
    """The loss a replayed job reports now: its true curve at the iterations it has
    done, plus noise seeded by (job id, iteration). Reads `total_iters` (oracle) only
    to build the ground truth; the policy sees the report alone."""
    done = job.done_iters_at(now_s)
    curve, per_epoch = true_loss_curve(job.job_id, job.total_iters)
    seed = zlib.crc32(f"optimus-noise/{job.job_id}/{int(done)}".encode())
    noise = random.Random(seed).gauss(0.0, LOSS_NOISE)
    return LossReport(done, max(0.0, curve.loss(done / per_epoch) + noise), per_epoch)
