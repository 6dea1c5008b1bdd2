"""What a model profile holds, in which units, and the restart model it defaults to.

`ModelProfile` is the catalogue's entry (controller.model.catalog.entries builds one
per model; controller.model.catalog looks them up), read by the performance model
(controller.model.perf) and by the policies that need a model's size or shape.
Figures are fp32, per V100; the measured profiles were taken on the Pollux testbed,
whose speed and links (`PROFILED_*`, read by perf) convert them to V100 figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model.cluster import PCIE_LEVEL_EFFICIENCY, PcieLevel

MIB = 2**20
FP32_BYTES = 4

# Overlap exponent of compute and all-reduce for profiles without measurements: about
# the median of the gamma fitted to the six Pollux profiles (they range from 1.0 to 2.6);
# tests/controller/model/test_catalog.py checks it stays near that median.
DEFAULT_GAMMA = 1.2

# Restart = process start + checkpoint write + read. gpuflow's assumption, in the range
# of seconds to tens of seconds that Gandiva (Xiao et al., OSDI'18 §4, migration by
# checkpoint/restore) and Pollux (OSDI'21 §4, re-allocation by checkpoint-restart)
# describe: a framework/NCCL start of 10 s, and state moved at 1 GiB/s each way.
RESTART_BASE_S = 10.0
CHECKPOINT_MIB_PER_S = 1024.0

# The Pollux testbed (OSDI'21 §5.1): AWS g4dn.12xlarge nodes, 4 NVIDIA T4 each, 50 Gbit/s
# Ethernet (AWS's instance table). A T4 against a V100, fp32 ResNet-50: 426 vs 1349
# img/s at batch 256 (NVIDIA DeepLearningExamples, TensorFlow ResNet-50 v1.5 README,
# inference tables, 20.06 container; NVIDIA publishes no T4 training figure there), so
# measured compute times are multiplied by 0.32 to give V100 times. The T4s sit on PCIe
# 3.0 x16 (126 Gbit/s raw); gpuflow assumes P2P through the host bridge.
PROFILED_GPU_SPEED = 0.32
PROFILED_INTRA_GBPS = 126.0 * PCIE_LEVEL_EFFICIENCY[PcieLevel.PHB]
PROFILED_NIC_GBPS = 50.0


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model's figures: size, compute on one V100, batch, memory, packing, restart.

    Compute time of one iteration at local batch m on one V100 (fp32) is
    `overhead_s + per_sample_s * m`. `batch_size` is the reference global batch,
    `local_batch` the reference per-GPU batch at which `mem_mib` was taken, and
    `max_local_batch` the largest per-GPU batch that fits (above it, gradient
    accumulation). `gpu_util` is the GPU utilisation of the job alone (0..1). `skewed`
    marks models whose parameters sit in a few very large tensors, which Tiresias
    consolidates (Gu et al., NSDI'19 §4, Fig. 4: the VGG family and AlexNet are skewed,
    ResNet and Inception are not). `measured` names the Pollux profile, if any.
    """

    name: str
    parameters_m: float
    per_sample_s: float
    overhead_s: float
    batch_size: int
    local_batch: int
    max_local_batch: int
    mem_mib: int
    gpu_util: float
    skewed: bool
    source: str
    measured: str | None = None
    grad_mib: float = 0.0  # all-reduced bytes per iteration; 0 means fp32 parameters
    gamma: float = DEFAULT_GAMMA
    restart_s: float = 0.0  # 0 means the default restart model

    def __post_init__(self) -> None:
        if self.grad_mib <= 0:
            object.__setattr__(self, "grad_mib", self.parameters_m * 1e6 * FP32_BYTES / MIB)
        if self.restart_s <= 0:
            object.__setattr__(self, "restart_s", default_restart_s(self.parameters_m))
        if not 0.0 < self.gpu_util <= 1.0:
            raise ValueError(f"{self.name}: gpu_util must be in (0, 1]")

    def compute_s(self, local_batch: float) -> float:
        """Compute time of one iteration on one V100, with gradient accumulation."""
        steps = max(1, math.ceil(local_batch / self.max_local_batch - 1e-9))
        return steps * self.overhead_s + self.per_sample_s * local_batch


def default_restart_s(parameters_m: float, state_copies: int = 3) -> float:
    """Checkpoint-restart time: weights plus optimizer state (Adam: 2 more copies)."""
    state_mib = parameters_m * 1e6 * FP32_BYTES * state_copies / MIB
    return RESTART_BASE_S + 2.0 * state_mib / CHECKPOINT_MIB_PER_S
