"""The GPU catalogue: datasheet figures per GPU model, found by gpuflow's name or NVML's.

Cluster specs (controller.spec: `gpu:` in YAML, the presets) build their GPU types
from it, and the node agent (operators/agent/discovery.py) maps the product name NVML
reports (`nvmlDeviceGetName`, as `nvidia-smi -L` prints it) to its entry, so that what
the agent publishes is what a replay of the same cluster assumes. The entries, with
their sources, are in controller.model.gpus.entries.

`speed` is training throughput relative to a V100-SXM2 (the GPU the model catalogue's
profiles are measured on or scaled to), read as the GPU's speed in TF32 against the
V100's fp32 (controller.model.precision states the precisions and the ratio between
them; controller.model.perf replaces the scalar with a model's measured rate where
controller.model.perf.throughputs has one). Where no training comparison is cited, an
entry derives it from a cited entry, `relative_speed`: the geometric mean of the two
ratios that bound a training step, dense 16-bit tensor throughput (compute-bound
layers) and memory bandwidth (the rest), times the reference's speed. The agent does
the same for a GPU the catalogue lacks, from the figures NVML reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from controller.model.cluster import GpuType

# PCIe x16 host link, one direction, after 128b/130b line coding (PCI-SIG base
# specifications 3.0/4.0/5.0): Gen3 8 GT/s -> 15.75 GB/s = 126 Gbit/s, Gen4 16 GT/s ->
# 252, Gen5 32 GT/s -> 504. NVIDIA's datasheets round these to 32/64/128 GB/s counting
# both directions.
PCIE_X16_GBPS: Mapping[int, float] = MappingProxyType({3: 126.0, 4: 252.0, 5: 504.0})


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model as its datasheet gives it.

    `name` is gpuflow's name (the `GpuType` name, `gpu:` in specs, a job's
    gpuModels); `products` the names NVML reports for it. Throughputs are dense (no
    2:4 sparsity), in TFLOPS: `fp32` on CUDA cores, `tf32` and `bf16` on tensor
    cores (None before Ampere), `fp16` the tensor throughput mixed-precision
    training gets (FP16 with FP32 accumulation; non-tensor FP16 on a P100).
    `nvlink_lanes` is how many NVLink links the GPU has (0: none; on PCIe cards,
    through a bridge), `nvlink_lane_gbps` one of them in one direction. `speed_from`
    names the entry `speed` was derived from (None: `speed` is cited).
    """

    name: str
    products: tuple[str, ...]
    compute_capability: tuple[int, int]
    mem_mib: int
    mem_gbs: float
    pcie_gen: int
    nvlink_lanes: int
    nvlink_lane_gbps: float
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float
    speed: float
    source: str
    speed_from: str | None = None

    def __post_init__(self) -> None:
        if self.pcie_gen not in PCIE_X16_GBPS:
            raise ValueError(f"{self.name}: PCIe Gen{self.pcie_gen} has no stated x16 rate")
        if (self.nvlink_lanes == 0) != (self.nvlink_lane_gbps == 0.0):
            raise ValueError(f"{self.name}: NVLink lanes and lane speed must both be 0 or not")

    @property
    def pcie_gbps(self) -> float:
        return PCIE_X16_GBPS[self.pcie_gen]

    def gpu_type(self) -> GpuType:
        """The model the scheduler plans with."""
        return GpuType(self.name, self.mem_mib, self.nvlink_lane_gbps, self.pcie_gbps, self.speed)


def relative_speed(
    reference_speed: float, compute_ratio: float | None, memory_ratio: float | None
) -> float:
    """A speed from a reference's: the geometric mean of the compute and memory
    bandwidth ratios against it (either alone when the other is unknown; the
    reference's speed when both are)."""
    ratios = [r for r in (compute_ratio, memory_ratio) if r is not None]
    if not ratios:
        return reference_speed
    return reference_speed * math.prod(ratios) ** (1.0 / len(ratios))


def derived(reference: GpuSpec, fp16_tflops: float, mem_gbs: float) -> float:
    """An entry's speed from a cited entry's datasheet figures (module docstring),
    to two decimals: the rule is not finer than that."""
    speed = relative_speed(
        reference.speed, fp16_tflops / reference.fp16_tflops, mem_gbs / reference.mem_gbs
    )
    return round(speed, 2)


def normalised(name: str) -> str:
    """A name with case, spaces and punctuation dropped, and the vendor and brand words
    NVML adds ('NVIDIA', 'Tesla', 'GeForce'): "NVIDIA H100 80GB HBM3", the GPU Feature
    Discovery label "NVIDIA-H100-80GB-HBM3" and "h100 80gb hbm3" are one name."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    return "".join(w for w in words if w not in {"nvidia", "tesla", "geforce"})


class GpuCatalog:
    """The entries by gpuflow name, and every name (gpuflow's or NVML's) normalised."""

    def __init__(self, entries: tuple[GpuSpec, ...], unit: str) -> None:
        self.entries = entries
        self.by_name: Mapping[str, GpuSpec] = MappingProxyType({e.name: e for e in entries})
        index: dict[str, GpuSpec] = {}
        for e in entries:
            for alias in (e.name, *e.products):
                key = normalised(alias)
                other = index.setdefault(key, e)
                if other is not e:
                    raise ValueError(f"{alias!r} names both {other.name} and {e.name}")
        self._index = index
        if len(self.by_name) != len(entries):
            raise ValueError("GPU names must be unique")
        self.unit = self.by_name[unit]
        if self.unit.speed != 1.0 or self.unit.speed_from is not None:
            raise ValueError(f"{unit}: the unit of speed must have a cited speed of 1.0")

    def find(self, name: str) -> GpuSpec | None:
        """The entry `name` names: gpuflow's name or an NVML product name, as written
        or normalised (`normalised`); None when the catalogue has none."""
        return self.by_name.get(name) or self._index.get(normalised(name))

    def names(self) -> dict[str, GpuSpec]:
        """Every name a spec may write as `gpu:`: gpuflow's and the NVML products'."""
        out = {e.name: e for e in self.entries}
        for e in self.entries:
            out.update(dict.fromkeys(e.products, e))
        return out

    def reference_for(self, compute_capability: tuple[int, int] | None) -> GpuSpec:
        """The entry with a cited speed nearest in compute capability (same
        architecture first, then the nearest minor version; catalogue order breaks
        ties): what an unknown GPU's speed is derived from. None: `unit`, the GPU
        speeds are relative to."""
        if compute_capability is None:
            return self.unit
        cited = [e for e in self.entries if e.speed_from is None]
        major, minor = compute_capability
        return min(
            cited,
            key=lambda e: (
                abs(e.compute_capability[0] - major),
                abs(e.compute_capability[1] - minor),
            ),
        )
