"""Training precision: what a job trains in, and what that does to a GPU's speed.

A job says its precision (`JobSpec.precision`: a trace's `precision` column, a DLJob's
spec.precision, the API's `precision`); the performance model (controller.model.perf)
multiplies a GPU's speed by `precision_ratio` where no throughput was measured for the
job's model at that precision (controller.model.perf.throughputs).

The catalogue's figures assume `DEFAULT_PRECISION`, TF32: fp32 weights and
activations with TF32 tensor-core matmuls and convolutions where the GPU has them
(Ampere and later; PyTorch's default for convolutions, `cudnn.allow_tf32`), plain FP32
before. The model profiles are fp32 on a V100 (controller.model.catalog.entries), which
has no TF32, and a GPU's `speed` is read as its TF32 speed against that: the H200's
derived 7.2 against its measured 7.3 (ResNet-50 in TF32 against the V100's fp32; the
H200 entry in controller.model.gpus.entries). A job that states nothing trains in TF32,
so its speed is what it was before jobs could state a precision.

The ratio from TF32 to precision p on a GPU, from its datasheet: the geometric mean of
the dense throughput ratio (`tflops`) and the ratio of bytes moved per value (4 for
fp32 and TF32, which keep fp32 storage; 2 for bf16 and fp16), the rule the GPU
catalogue uses between GPUs (`controller.model.gpus.relative_speed`): a training step
is bounded partly by tensor throughput and partly by memory traffic. Throughput alone
would make fp16 on a V100 8x fp32 (125 against 15.7 TFLOPS), where NVIDIA's mixed
precision ResNet-50 trains about 3x as fast; the rule gives 4x. On the H200 it gives
2.0x from TF32 to bf16; the measured ResNet-50 gained 1.55x (3,011 to 4,680 img/s,
controller/model/profiles/h200-sharing), and that measurement is what the model uses
for ResNet-50 there. A GPU without bf16 tensor cores (before Ampere) gains nothing from
bf16 (PyTorch emulates it): ratio 1. A GPU type the GPU catalogue does not know (a
spec's own figures) has no datasheet: ratio 1 for every precision.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache

from controller.model.gpus import GPU_CATALOG, GpuSpec, relative_speed


class Precision(StrEnum):
    """What a job's matmuls and convolutions run in (module docstring)."""

    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


DEFAULT_PRECISION = Precision.TF32
CHOICES = tuple(p.value for p in Precision)

# Bytes a value takes in memory: TF32 is a tensor-core math mode on fp32 storage.
BYTES = {Precision.FP32: 4, Precision.TF32: 4, Precision.BF16: 2, Precision.FP16: 2}


def parse_precision(value: object) -> Precision:
    """A precision from its name; ValueError naming the choices otherwise."""
    if isinstance(value, str) and value in CHOICES:
        return Precision(value)
    raise ValueError(f"must be one of {', '.join(CHOICES)}, not {value!r}")


def tflops(spec: GpuSpec, precision: Precision) -> float:
    """Dense throughput of `spec` in `precision`: TF32 runs as FP32 on a GPU without
    TF32 tensor cores; bf16 on one without bf16 tensor cores as FP32 too."""
    if precision is Precision.FP16:
        return spec.fp16_tflops
    if precision is Precision.BF16:
        return spec.bf16_tflops if spec.bf16_tflops is not None else spec.fp32_tflops
    if precision is Precision.TF32 and spec.tf32_tflops is not None:
        return spec.tf32_tflops
    return spec.fp32_tflops


def effective(spec: GpuSpec, precision: Precision) -> Precision:
    """The precision `precision` runs as on `spec`: TF32 is FP32 before Ampere."""
    if precision is Precision.TF32 and spec.tf32_tflops is None:
        return Precision.FP32
    return precision


@cache
def precision_ratio(gpu_name: str, precision: Precision) -> float:
    """A GPU's speed in `precision` over its speed in TF32 (module docstring); 1.0 for
    a GPU the catalogue does not know."""
    spec = GPU_CATALOG.find(gpu_name)
    if spec is None:
        return 1.0
    if precision is Precision.BF16 and spec.bf16_tflops is None:
        return 1.0
    compute = tflops(spec, precision) / tflops(spec, DEFAULT_PRECISION)
    memory = BYTES[DEFAULT_PRECISION] / BYTES[precision]
    return relative_speed(1.0, compute, memory)
