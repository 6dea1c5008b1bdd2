"""Speed per model: measured throughputs (controller.model.perf.throughputs) over the scalar
GPU speed, and the precision a job trains in (controller.model.precision)."""

from __future__ import annotations

import json
import math

import pytest

from controller.model.allocation import Allocation
from controller.model.catalog import CATALOG, GENERIC, resolve
from controller.model.cluster import Cluster, GpuType, Rack
from controller.model.gpus import GPU_CATALOG
from controller.model.job import JobSpec
from controller.model.perf import iteration_time_s
from controller.model.perf.throughputs import (
    GAVEL_GPUS,
    GAVEL_MODELS,
    MeasuredRate,
    ThroughputTable,
    parse_gavel,
    shipped_throughputs,
)
from controller.model.precision import Precision, parse_precision, precision_ratio
from tests.controller.model.builders import make_node

RESNET = CATALOG["resnet50"]
VGG = CATALOG["vgg16"]  # measured nowhere: scalar speeds only
ONE = Allocation.whole([(0, 0)])


def gpu(name: str) -> GpuType:
    spec = GPU_CATALOG.find(name)
    assert spec is not None
    return spec.gpu_type()


def one_node(gpu_type: GpuType) -> Cluster:
    return Cluster("c", (make_node("a", gpu_type=gpu_type),), (Rack("r", 100.0),))


def test_a_measured_rate_beats_the_scalar_speed() -> None:
    """ResNet-50 on an H200 in TF32 at its measured batch of 128 steps as measured
    (23.526/s), not as the profile's V100 time over the H200's scalar 7.18."""
    h200 = gpu("NVIDIA H200")
    step = iteration_time_s(RESNET, one_node(h200), ONE, batch_size=128)
    assert step == pytest.approx(1 / 23.526)
    assert step != pytest.approx(RESNET.compute_s(128) / h200.speed, rel=0.01)
    # bf16 at 256 as measured too: 18.279 steps/s.
    bf16 = iteration_time_s(RESNET, one_node(h200), ONE, batch_size=256, precision=Precision.BF16)
    assert bf16 == pytest.approx(1 / 18.279)


def test_other_batches_follow_the_profiles_shape_from_the_nearest_measured_one() -> None:
    h200 = gpu("NVIDIA H200")
    at_64 = iteration_time_s(RESNET, one_node(h200), ONE, batch_size=64)
    assert at_64 == pytest.approx(RESNET.compute_s(64) / RESNET.compute_s(128) / 23.526)


def test_gavels_v100_rates_are_the_v100s_for_resnet50() -> None:
    """Gavel measured ResNet-50 on one V100 at 16, 32, 64 and 128 per step; the one
    nearest the profile's local batch (32: 7.787 steps/s, fp32, which the default TF32
    is on a V100) sets the model's speed there, and other batches follow the profile."""
    v100 = one_node(gpu("V100-SXM2-16GB"))
    assert iteration_time_s(RESNET, v100, ONE, batch_size=32) == pytest.approx(1 / 7.7873, rel=1e-4)
    at_64 = iteration_time_s(RESNET, v100, ONE, batch_size=64)
    assert at_64 == pytest.approx(RESNET.compute_s(64) / RESNET.compute_s(32) / 7.7873, rel=1e-4)


def test_an_unmeasured_gpu_scales_the_models_measured_v100_speed_by_its_scalar() -> None:
    """ResNet-50 was measured on the V100 (Gavel) but not on an A100: the A100 runs it
    at 2.5x the V100's measured speed, so that the two keep their order for it."""
    v100 = iteration_time_s(RESNET, one_node(gpu("V100-SXM2-16GB")), ONE, batch_size=64)
    a100 = iteration_time_s(RESNET, one_node(gpu("A100-SXM4-40GB")), ONE, batch_size=64)
    assert v100 / a100 == pytest.approx(2.5)


def test_precision_scales_an_unmeasured_model_by_the_datasheet_ratio() -> None:
    """vgg16 has no measured rate: bf16 on an A100 is sqrt(312/156 x 4/2) = 2.0x TF32,
    fp32 sqrt(19.5/156) = 0.35x; fp16 on a V100 sqrt(125/15.7 x 2) = 3.99x, and TF32
    there is FP32."""
    a100, v100 = one_node(gpu("A100-SXM4-40GB")), one_node(gpu("V100-SXM2-16GB"))

    def step(cluster: Cluster, precision: Precision) -> float:
        return iteration_time_s(VGG, cluster, ONE, batch_size=32, precision=precision)

    assert step(a100, Precision.TF32) / step(a100, Precision.BF16) == pytest.approx(2.0)
    assert step(a100, Precision.TF32) / step(a100, Precision.FP32) == pytest.approx(
        math.sqrt(19.5 / 156)
    )
    assert step(v100, Precision.TF32) / step(v100, Precision.FP16) == pytest.approx(
        math.sqrt(125 / 15.7 * 2)
    )
    assert step(v100, Precision.FP32) == step(v100, Precision.TF32)
    assert step(v100, Precision.BF16) == step(v100, Precision.TF32)  # no bf16 units


def test_a_rate_measured_in_another_precision_is_scaled_by_the_ratio() -> None:
    """fp16 on the H200: the bf16 measurement, times fp16's ratio over bf16's (1)."""
    h200 = one_node(gpu("NVIDIA H200"))
    fp16 = iteration_time_s(RESNET, h200, ONE, batch_size=256, precision=Precision.FP16)
    assert fp16 == pytest.approx(1 / 18.279)


def test_an_unknown_model_falls_back_to_the_scalar_speed() -> None:
    h200 = gpu("NVIDIA H200")
    assert resolve("my-own-net") is GENERIC
    step = iteration_time_s(GENERIC, one_node(h200), ONE, batch_size=32)
    assert step == pytest.approx(GENERIC.compute_s(32) / h200.speed)


def test_a_gpu_type_of_a_specs_own_has_no_datasheet_ratio() -> None:
    assert precision_ratio("my-gpu", Precision.BF16) == 1.0


def test_a_job_on_two_gpu_types_runs_at_its_slowest_for_its_model() -> None:
    """ResNet-50 across an H200 node and a V100 node steps at the V100's measured
    speed, not the scalar 1.0 of the V100."""
    cluster = Cluster(
        "c",
        (
            make_node("a", gpu_type=gpu("NVIDIA H200")),
            make_node("b", gpu_type=gpu("V100-SXM2-16GB")),
        ),
        (Rack("r", 100.0),),
    )
    two = Allocation.whole([(0, 0), (1, 0)])
    mixed = iteration_time_s(RESNET, cluster, two, batch_size=128)
    v100_only = Cluster("c", (make_node("a"), make_node("b")), (Rack("r", 100.0),))
    assert mixed == pytest.approx(iteration_time_s(RESNET, v100_only, two, batch_size=128))


def test_gavels_format_is_parsed_for_the_mapped_job_types_only() -> None:
    text = json.dumps(
        {
            "v100": {
                "('ResNet-50 (batch size 64)', 1)": {"null": 4.4, "('A3C', 1)": [1.0, 2.0]},
                "('ResNet-50 (batch size 64)', 8)": {"null": 17.3},
                "('Recommendation (batch size 512)', 1)": {"null": 9.0},
                "('A3C', 1)": {"null": 7.2},
                "('CycleGAN', 4)": {"null": 0.0},
            },
            "v100_unconsolidated": {"('A3C', 1)": {"null": 1.0}},
        }
    )
    rates = parse_gavel(text, GAVEL_MODELS, GAVEL_GPUS)
    assert sorted((r.model, r.gpus, r.batch, r.iters_per_s) for r in rates) == [
        ("a3c", 1, None, 7.2),
        ("resnet50", 1, 64, 4.4),
        ("resnet50", 8, 64, 17.3),
    ]
    assert {r.gpu for r in rates} == {"V100-SXM2-16GB"}
    assert {r.precision for r in rates} == {Precision.FP32}


def test_the_shipped_table_holds_the_h200_and_gavels_rates() -> None:
    table = shipped_throughputs()
    h200 = table.rate("resnet50", "NVIDIA H200", Precision.TF32, 1, 128)
    assert h200 is not None and h200.iters_per_s == 23.526 and "h200" in h200.source
    # Found by NVML's name, gpuflow's and Gavel's K80 name alike; 8 GPUs as well.
    assert table.rate("resnet50", "H200-SXM-141GB", Precision.TF32) == h200
    assert table.rate("cifar10", "Tesla K80", Precision.FP32, 1, 16) is not None
    assert table.rate("resnet50", "V100-SXM2-16GB", Precision.FP32, 8, 64) is not None
    # Nothing for models the H200 session measured that are not the catalogue's.
    assert table.rate("cifar10", "NVIDIA H200", None) is None
    assert table.rate("ncf", "V100-SXM2-16GB", None) is None


def test_the_nearest_batch_is_chosen_in_ratio() -> None:
    rows = [
        MeasuredRate("m", "Tesla V100-SXM2-16GB", Precision.FP32, 1, b, 1.0 / b, "test")
        for b in (16, 64, 256)
    ]
    table = ThroughputTable(rows)
    picks = [table.rate("m", "V100-SXM2-16GB", Precision.TF32, 1, b) for b in (20, 40, 100, 10_000)]
    assert [r.batch if r else None for r in picks] == [16, 64, 64, 256]


@pytest.mark.parametrize("value", ["int8", "FP16", "", None])
def test_a_bad_precision_is_refused_naming_the_choices(value: object) -> None:
    with pytest.raises(ValueError, match="must be one of tf32, bf16, fp16, fp32"):
        parse_precision(value)
    with pytest.raises(ValueError, match="precision"):
        JobSpec("j", 0.0, 1, duration_s=1.0, precision=value)  # type: ignore[arg-type]
