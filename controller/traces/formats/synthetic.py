"""Synthetic Philly-like workloads, for experiments that need more or other load than a trace.

Called by the CLI and experiment drivers in place of `load_trace`. `generate` draws,
from one seeded numpy generator (so a seed always gives the same jobs):

- GPU counts from `GPU_COUNT_SHARES`. Jeon et al. ("Analysis of Large-Scale
  Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019) find most
  Philly jobs use a single GPU, with fewer at 2, 4 and 8 and a small tail of 16 and
  more. The shares follow the Philly-derived sampler Gavel uses
  (scheduler/utils.py `_generate_scale_factor`: 70% 1 GPU, 10% 2, 15% 4, 5% 8), with 2
  points of the 4-GPU share moved to 16 and 32 GPUs for that tail. Counts above the
  cluster's size are capped at it.
- Run times from a log-normal with a median of `MEDIAN_RUN_S` (30 min) and shape
  `RUN_SIGMA` (2.0: 5% of jobs run over 13 h and 1% over 2 days), clipped to
  [`MIN_RUN_S`, `MAX_RUN_S`] (1 min to 14 days). Jeon et al. report run times from
  minutes to weeks with a heavy tail; the shape is chosen to show that, not fitted.
- Arrivals as a Poisson process whose rate makes the offered load (GPU-seconds asked
  per second, over the cluster's GPUs) equal `load`, using the drawn jobs' mean
  GPU-seconds. "diurnal" thins a faster Poisson process to a rate that swings by
  +/-`DIURNAL_AMPLITUDE` around the mean over a day, lowest at t = 0 (midnight) and
  highest at noon; the mean rate, hence the load over whole days, is unchanged.
- Models uniformly from `models`; tenants `tenant-0`..`tenant-{n-1}` with Zipf
  weights 1/k, so the first tenant submits most.

Jobs are rigid (min_gpus = max_gpus = num_gpus) and given by duration_s; the first
arrives at 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from controller.model.job import JobSpec

DEFAULT_MODELS = (
    "resnet50",
    "vgg16",
    "bert",
    "gpt2",
    "yolov3",
    "deepspeech2",
    "ncf",
    "cifar10",
)

GPU_COUNT_SHARES: dict[int, float] = {1: 0.70, 2: 0.10, 4: 0.13, 8: 0.05, 16: 0.015, 32: 0.005}

MEDIAN_RUN_S = 30 * 60.0
RUN_SIGMA = 2.0
MIN_RUN_S = 60.0
MAX_RUN_S = 14 * 86400.0

DAY_S = 86400.0
DIURNAL_AMPLITUDE = 0.5  # rate from 0.5x to 1.5x the mean: 3x more arrivals at noon

ARRIVALS = ("poisson", "diurnal")


def _poisson_arrivals(
    rng: np.random.Generator, num_jobs: int, rate_per_s: float
) -> npt.NDArray[np.float64]:
    return np.cumsum(rng.exponential(1.0 / rate_per_s, num_jobs))


def _diurnal_arrivals(
    rng: np.random.Generator, num_jobs: int, rate_per_s: float
) -> npt.NDArray[np.float64]:
    """Poisson arrivals at rate * (1 - A cos(2 pi t / day)), by thinning (Lewis-Shedler)."""
    peak_rate = rate_per_s * (1.0 + DIURNAL_AMPLITUDE)
    kept: list[npt.NDArray[np.float64]] = []
    found, clock_s = 0, 0.0
    while found < num_jobs:
        # Enough candidates to finish in one pass almost always: 1 in 1 + A is kept.
        batch = int((num_jobs - found) * (1.0 + DIURNAL_AMPLITUDE) * 1.2) + 64
        times = clock_s + np.cumsum(rng.exponential(1.0 / peak_rate, batch))
        rate = rate_per_s * (1.0 - DIURNAL_AMPLITUDE * np.cos(2.0 * math.pi * times / DAY_S))
        accepted = times[rng.random(batch) * peak_rate < rate]
        kept.append(accepted)
        found += accepted.size
        clock_s = float(times[-1])
    return np.concatenate(kept)[:num_jobs]


def generate(
    num_jobs: int,
    *,
    seed: int,
    cluster_gpus: int,
    load: float = 0.9,
    arrival: str = "poisson",
    models: Sequence[str] = DEFAULT_MODELS,
    num_tenants: int = 4,
) -> list[JobSpec]:
    """`num_jobs` Philly-like jobs offering `load` times `cluster_gpus` GPUs of work."""
    if num_jobs < 0:
        raise ValueError(f"num_jobs must be >= 0, got {num_jobs}")
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus must be >= 1, got {cluster_gpus}")
    if not load > 0:
        raise ValueError(f"load must be > 0, got {load}")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if not models:
        raise ValueError("models must not be empty")
    if num_tenants < 1:
        raise ValueError(f"num_tenants must be >= 1, got {num_tenants}")
    if num_jobs == 0:
        return []

    rng = np.random.default_rng(seed)
    counts = np.fromiter(GPU_COUNT_SHARES, dtype=np.int64)
    shares = np.fromiter(GPU_COUNT_SHARES.values(), dtype=np.float64)
    gpus = np.minimum(rng.choice(counts, size=num_jobs, p=shares / shares.sum()), cluster_gpus)
    run_s = np.clip(
        rng.lognormal(math.log(MEDIAN_RUN_S), RUN_SIGMA, num_jobs), MIN_RUN_S, MAX_RUN_S
    )
    model_index = rng.integers(0, len(models), num_jobs)
    tenant_weights = 1.0 / np.arange(1, num_tenants + 1)
    tenant_index = rng.choice(num_tenants, size=num_jobs, p=tenant_weights / tenant_weights.sum())

    # Offered load = rate * E[gpus * run_s] / cluster_gpus.
    rate_per_s = load * cluster_gpus / float(np.mean(gpus * run_s))
    if arrival == "poisson":
        arrivals_s = _poisson_arrivals(rng, num_jobs, rate_per_s)
    else:
        arrivals_s = _diurnal_arrivals(rng, num_jobs, rate_per_s)
    submit_s = arrivals_s - arrivals_s[0]

    width = len(str(num_jobs - 1))
    tenants = [f"tenant-{k}" for k in range(num_tenants)]
    return [
        JobSpec(
            job_id=f"job-{i:0{width}d}",
            submit_s=submit,
            num_gpus=num_gpus,
            model=models[m],
            duration_s=duration,
            tenant=tenants[t],
        )
        for i, (submit, num_gpus, duration, m, t) in enumerate(
            zip(
                submit_s.tolist(),
                gpus.tolist(),
                run_s.tolist(),
                model_index.tolist(),
                tenant_index.tolist(),
                strict=True,
            )
        )
    ]
