"""The gradient statistics against a case with a known answer: least squares with a
fixed weight vector, whose per-sample gradients g_j = x_j (x_j . w - y_j) over a
finite population give |G|^2 and tr(Sigma) exactly. Batches drawn with replacement
make E|g_b|^2 = |G|^2 + tr(Sigma)/b hold exactly, as the estimators assume."""

import numpy as np
import pytest
import torch

from gpuflow.train.distributed import backward_in_halves
from gpuflow.train.gradstats import NoiseEstimate, NoiseState, estimate, smooth

DIM = 8
POPULATION = 4096


def _problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(POPULATION, DIM))
    y = x @ rng.normal(size=DIM) + 0.5 * rng.normal(size=POPULATION)
    w = np.zeros(DIM)  # far from the optimum, so |G|^2 is not lost in the noise
    per_sample = x * (x @ w - y)[:, None]
    mean = per_sample.mean(axis=0)
    trace = float(((per_sample - mean) ** 2).sum(axis=1).mean())
    return x, y, w, float(mean @ mean), trace


def test_replica_estimates_are_unbiased() -> None:
    x, y, w, true_sqr, true_var = _problem()
    rng = np.random.default_rng(1)
    replicas, b, trials = 4, 8, 3000
    sqr, var = [], []
    for _ in range(trials):
        grads = []
        for _ in range(replicas):
            idx = rng.integers(0, POPULATION, size=b)
            grads.append((x[idx] * (x[idx] @ w - y[idx])[:, None]).mean(axis=0))
        local = float(np.mean([g @ g for g in grads]))
        avg = np.mean(grads, axis=0)
        est = estimate(local, float(avg @ avg), replicas, b)
        sqr.append(est.grad_sqr)
        var.append(est.grad_var)
    assert np.mean(sqr) == pytest.approx(true_sqr, rel=0.05)
    assert np.mean(var) == pytest.approx(true_var, rel=0.05)
    # A wrong normalisation (per batch instead of per sample) would be off by b.
    assert np.mean(var) != pytest.approx(true_var / b, rel=0.5)


def test_halves_of_one_replica_through_torch_are_unbiased() -> None:
    x, y, w, true_sqr, true_var = _problem()
    xt, yt = torch.tensor(x), torch.tensor(y)
    weight = torch.nn.Parameter(torch.tensor(w))
    gen = torch.Generator().manual_seed(2)
    batch, trials = 16, 3000
    sqr, var = [], []
    for _ in range(trials):
        idx = torch.randint(0, POPULATION, (batch,), generator=gen)
        losses = 0.5 * (xt[idx] @ weight - yt[idx]) ** 2
        weight.grad = None
        local, full = backward_in_halves(losses, [weight])
        # The .grad left behind is that of the whole batch's mean loss.
        expected = (xt[idx] * (xt[idx] @ weight - yt[idx])[:, None]).mean(dim=0)
        torch.testing.assert_close(weight.grad, expected.detach())
        est = estimate(local, full, 2, batch // 2)
        sqr.append(est.grad_sqr)
        var.append(est.grad_var)
    assert np.mean(sqr) == pytest.approx(true_sqr, rel=0.05)
    assert np.mean(var) == pytest.approx(true_var, rel=0.05)


def test_one_replica_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        estimate(1.0, 1.0, 1, 8)


def test_smoothing_is_bias_corrected_and_weighs_recent_estimates_more() -> None:
    first = smooth(NoiseState(), NoiseEstimate(grad_sqr=2.0, grad_var=6.0))
    assert first.smoothed() == NoiseEstimate(grad_sqr=2.0, grad_var=6.0)  # not 0.02, 0.06
    state = smooth(NoiseState(), NoiseEstimate(grad_sqr=2.0, grad_var=6.0), smoothing=0.5)
    state = smooth(state, NoiseEstimate(grad_sqr=4.0, grad_var=6.0), smoothing=0.5)
    got = state.smoothed(smoothing=0.5)
    assert got is not None
    # Weights 1/3 and 2/3 once corrected: (0.5*0.5*2 + 0.5*4) / (1 - 0.5**2).
    assert got.grad_sqr == pytest.approx(2.0 / 3 + 8.0 / 3)
    assert got.grad_var == pytest.approx(6.0)
    assert NoiseState().smoothed() is None
