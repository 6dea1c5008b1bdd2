"""Gradient noise statistics for Pollux: |G|^2 (grad_sqr) and tr(Sigma) (grad_var).

Pollux (Qiao et al., OSDI 2021, §3.1) models a job's statistical efficiency at total
batch M through the gradient noise scale phi = tr(Sigma) / |G|^2, where G is the true
gradient and Sigma the covariance of a per-sample gradient; the job reports the two
terms and the scheduler forms phi. As AdaptDL's GradientNoiseScale does, both come
from the estimators of McCandlish et al., "An Empirical Model of Large-Batch
Training" (2018), Appendix A.1: for the gradient of a mean loss over B samples,
E|g_B|^2 = |G|^2 + tr(Sigma)/B, so two batch sizes B_small < B_big give the unbiased

    |G|^2     = (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    tr(Sigma) = (|g_small|^2 - |g_big|^2) / (1/B_small - 1/B_big)

With R >= 2 replicas of local batch b, B_small = b with |g_small|^2 the mean over
replicas of the local |g_i|^2 (taken before the all-reduce), and B_big = R b with
|g_big|^2 the all-reduced gradient's norm; this reduces to

    |G|^2     = (R |g|^2 - mean_i |g_i|^2) / (R - 1)
    tr(Sigma) = b R (mean_i |g_i|^2 - |g|^2) / (R - 1)

With one replica the same formulas apply to the two halves of its batch (R = 2,
b = half the batch): `distributed.backward_in_halves` computes their gradients.

Deviations from AdaptDL: plain gradients (AdaptDL preconditions them by Adam's
second moments for adaptive optimisers), and an exponential moving average with
factor 0.99 per step with Adam's bias correction (Kingma & Ba 2015, §3), where
AdaptDL uses 0.999 with the same correction: our jobs and tests run hundreds of steps,
not hundreds of thousands. The single-step estimates are unbiased but noisy (either
can be negative); only the smoothed values are reported.

Pure arithmetic, no torch: called by `driver.Session` at each step boundary with
the scalars its all-reduce produced.
"""

from __future__ import annotations

from dataclasses import dataclass

# Per-step EMA factor; see the module docstring for why not AdaptDL's 0.999.
SMOOTHING = 0.99


@dataclass(frozen=True)
class NoiseEstimate:
    grad_sqr: float  # |G|^2
    grad_var: float  # tr(Sigma), per sample


def estimate(
    local_sqr_mean: float, global_sqr: float, replicas: int, local_batch: int
) -> NoiseEstimate:
    """The single-step unbiased estimates from mean_i |g_i|^2 over `replicas` replicas
    of `local_batch` samples each and the squared norm of their averaged gradient."""
    if replicas < 2:
        raise ValueError(f"need at least 2 replicas (or halves), got {replicas}")
    if local_batch < 1:
        raise ValueError(f"local_batch must be >= 1, got {local_batch}")
    r = float(replicas)
    grad_sqr = (r * global_sqr - local_sqr_mean) / (r - 1.0)
    grad_var = local_batch * r * (local_sqr_mean - global_sqr) / (r - 1.0)
    return NoiseEstimate(grad_sqr=grad_sqr, grad_var=grad_var)


@dataclass(frozen=True)
class NoiseState:
    """The smoothed statistics: biased EMAs and the number of updates (for the bias
    correction). Checkpointed with the job, so a resumed job keeps its history."""

    sqr_ema: float = 0.0
    var_ema: float = 0.0
    updates: int = 0

    @classmethod
    def from_dict(cls, saved: dict[str, float]) -> NoiseState:
        """From `dataclasses.asdict` of one, as a checkpoint holds it ({} for none)."""
        if not saved:
            return cls()
        return cls(saved["sqr_ema"], saved["var_ema"], int(saved["updates"]))

    def smoothed(self, smoothing: float = SMOOTHING) -> NoiseEstimate | None:
        if self.updates == 0:
            return None
        correction = 1.0 - smoothing**self.updates
        return NoiseEstimate(self.sqr_ema / correction, self.var_ema / correction)


def smooth(state: NoiseState, new: NoiseEstimate, smoothing: float = SMOOTHING) -> NoiseState:
    """The state after one more estimate."""
    return NoiseState(
        sqr_ema=smoothing * state.sqr_ema + (1.0 - smoothing) * new.grad_sqr,
        var_ema=smoothing * state.var_ema + (1.0 - smoothing) * new.grad_var,
        updates=state.updates + 1,
    )
