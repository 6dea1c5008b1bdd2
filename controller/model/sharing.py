"""GPU sharing: how much slower a job runs beside others on one GPU, by sharing mode.

`controller.model.perf` multiplies a job's compute time by `slowdown` (the replay, the
placers and the policies that read speeds all come through it); `gpuflow colocate`
asks `colocate` about a group of jobs before an admin turns sharing on. A node states
its mode (`Node.sharing`, from the cluster spec or its agent); the operator gives the
processes of a shared GPU an MPS client's limits where the mode is MPS.

The two modes the NVIDIA driver offers without MIG:

- time-slicing: each process has its own CUDA context and the GPU switches between
  them; a process's share of the GPU is not enforced.
- MPS: the processes are clients of one MPS server and their kernels run side by
  side; `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` caps the SMs a client's kernels use.

A job alone takes u (its utilisation, NVML's `utilization.gpu` of the job alone, 0..1)
of its step on the GPU and 1 - u launching work and waiting on the host. Beside others
whose utilisations sum to U, its step takes s times as long:

    p = min(1, U / u)                                  how much the others compete
    s = max((1 - u)(1 + h·p) + u·A(f),  (u + U)(1 + (k - 1)·p))

The first term is a job whose own cycle still bounds it: its host part slowed by h
(launches queue behind the other processes'), its GPU part by the MPS cap A(f). The
second is a saturated GPU that runs everyone's kernels, u + U of a step in all,
stretched by k: above 1 under time-slicing (context switches), below 1 under MPS
(kernels of two clients overlap). p scales both to the neighbours' load, so that an
idle neighbour costs nothing. Alone (U = 0), s = (1 - u) + u·A(f) under MPS and 1
under time-slicing.

The MPS cap: a client held to a fraction f of the SMs runs the SM-bound part b of its
GPU time 1/f times as long and the rest (memory- and latency-bound) as before:
A(f) = (1 - b) + b/f. Under time-slicing A = 1.

Calibration, in `SHARING`: k and h per mode from the pairs of
controller/model/profiles/h200-sharing/measurements.csv (one NVIDIA H200, PyTorch,
two copies of one model per pair): k is the geometric mean of slowdown / (u + U) over
the pairs that saturate the GPU (u + U >= 1: ResNet-50, ResNet-18, Transformer), h the
mean of (slowdown - 1) / (1 - u) over the launch-bound ones (the MLP, u = 0.064).
Every row is reproduced within 5 % (tests/controller/model/test_sharing.py). b from
the one capped run of the same session. Where the model is a guess (docs/sharing.md):
pairs of different models (p < 1), jobs bound by memory bandwidth (MPS overlaps
kernels, not DRAM traffic: k there is likely nearer 1), more than two jobs (U summed
as if one neighbour), caps whose sum is at most 1, and utilisations between the
launch-bound and the saturating rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class SharingMode(StrEnum):
    """How a node's GPUs run the processes that share them."""

    TIME_SLICING = "time-slicing"
    MPS = "mps"


# What the operator sets up for shared GPUs (an MPS client's thread percentage and
# memory limit per pod: operators/pods/__init__.py), hence what a cluster that says nothing has.
DEFAULT_SHARING = SharingMode.MPS


@dataclass(frozen=True, slots=True)
class ModeFit:
    """One mode's constants: `overlap` is k, the stretch of a saturated GPU's total
    work; `host` is h, the slowdown of a job's host-side part beside others."""

    overlap: float
    host: float


# Fitted on controller/model/profiles/h200-sharing/measurements.csv as the module
# docstring says; tests/controller/model/test_sharing.py refits and compares.
SHARING: dict[SharingMode, ModeFit] = {
    SharingMode.TIME_SLICING: ModeFit(overlap=1.1146, host=0.1599),
    SharingMode.MPS: ModeFit(overlap=0.9411, host=0.1917),
}

# Share of a saturating job's GPU time that scales with its SMs (b above). Issue 27's
# report of the same H200 session: ResNet-50 (u = 0.993) alone with
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 ran 1.46x slower, so 0.993·(1 + b) + 0.007 = 1.46.
# That run is kept out of measurements.csv; one point, one model.
MPS_SM_BOUND = 0.463


def cap_factor(fraction: float) -> float:
    """A(f): the stretch of a job's GPU time when MPS holds it to `fraction` of the SMs."""
    if fraction >= 1.0:
        return 1.0
    return (1.0 - MPS_SM_BOUND) + MPS_SM_BOUND / fraction


def slowdown(
    mode: SharingMode, own_util: float, others_util: float, fraction: float = 1.0
) -> float:
    """s: the job's step time beside neighbours of summed utilisation `others_util`,
    over its step time alone on a whole GPU (module docstring). `fraction` is its MPS
    share of the SMs; time-slicing enforces none."""
    cap = cap_factor(fraction) if mode is SharingMode.MPS else 1.0
    if others_util <= 0.0:
        return 1.0 if cap == 1.0 else (1.0 - own_util) + own_util * cap
    fit = SHARING[mode]
    pressure = min(1.0, others_util / own_util)
    own_cycle = (1.0 - own_util) * (1.0 + fit.host * pressure) + own_util * cap
    saturated = (own_util + others_util) * (1.0 + (fit.overlap - 1.0) * pressure)
    return max(own_cycle, saturated)


@dataclass(frozen=True, slots=True)
class Tenant:
    """One job of a group asked about: its utilisation alone (0..1], its GPU memory
    and its MPS share of the SMs (1: uncapped)."""

    util: float
    mem_mib: int
    fraction: float = 1.0


@dataclass(frozen=True, slots=True)
class Colocation:
    """What sharing one GPU does to a group: each job's slowdown (all of them
    running), whether its memory fits (the jobs take memory in the order given; one
    that does not fit takes none: it would fail at start), and the group's throughput
    summed over jobs, each normalised to itself alone (1.0: as good as one after the
    other)."""

    slowdowns: tuple[float, ...]
    fits_memory: tuple[bool, ...]
    throughput_gain: float


def colocate(mode: SharingMode, gpu_mem_mib: int, tenants: Sequence[Tenant]) -> Colocation:
    """The group `tenants` on one GPU of `gpu_mem_mib` MiB, shared in `mode`."""
    total = sum(t.util for t in tenants)
    slows = tuple(slowdown(mode, t.util, total - t.util, t.fraction) for t in tenants)
    fits: list[bool] = []
    used = 0
    for t in tenants:
        fits.append(used + t.mem_mib <= gpu_mem_mib)
        used += t.mem_mib if fits[-1] else 0
    return Colocation(slows, tuple(fits), sum(1.0 / s for s in slows))
