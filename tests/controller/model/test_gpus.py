"""The GPU catalogue: every product name NVML reports finds its entry, the figures
hold together, and speeds follow the rule the catalogue states."""

from __future__ import annotations

import pytest

from controller.model.gpus import GPU_CATALOG, PCIE_X16_GBPS, GpuSpec, relative_speed
from tests.nvml_names import NVML_NAMES


@pytest.mark.parametrize(("product", "name"), sorted(NVML_NAMES.items()))
def test_every_nvml_name_finds_its_entry(product: str, name: str) -> None:
    spec = GPU_CATALOG.find(product)
    assert spec is not None and spec.name == name
    assert product in spec.products


def test_every_entry_has_an_nvml_name_in_the_table() -> None:
    assert {e.name for e in GPU_CATALOG.entries} == set(NVML_NAMES.values())


@pytest.mark.parametrize(
    ("written", "name"),
    [
        ("A100-SXM4-40GB", "A100-SXM4-40GB"),  # drivers before R470: no "NVIDIA " prefix
        ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),  # GPU Feature Discovery's label
        ("nvidia h200", "H200-SXM-141GB"),
        ("RTX 4090", "RTX-4090-24GB"),
        ("H100-SXM5-80GB", "H100-SXM5-80GB"),
    ],
)
def test_other_spellings_are_found(written: str, name: str) -> None:
    spec = GPU_CATALOG.find(written)
    assert spec is not None and spec.name == name


@pytest.mark.parametrize("product", ["NVIDIA H100", "NVIDIA GeForce RTX 3060", "H100", ""])
def test_a_name_the_catalogue_lacks_is_none_not_a_neighbour(product: str) -> None:
    assert GPU_CATALOG.find(product) is None


def test_figures_hold_together() -> None:
    for e in GPU_CATALOG.entries:
        # Pascal and Kepler train FP16 on no tensor cores (the K80 no faster than FP32).
        assert e.fp16_tflops > e.fp32_tflops or e.name.startswith(("P100", "K80")), e.name
        if e.compute_capability >= (8, 0):
            assert e.tf32_tflops is not None and e.bf16_tflops == e.fp16_tflops, e.name
            assert e.pcie_gen >= 4, e.name
        else:
            assert e.tf32_tflops is None and e.bf16_tflops is None, e.name
        assert e.gpu_type().pcie_gbps == PCIE_X16_GBPS[e.pcie_gen]
        assert e.gpu_type().nvlink_gbps == e.nvlink_lane_gbps


@pytest.mark.parametrize("entry", GPU_CATALOG.entries, ids=lambda e: e.name)
def test_a_derived_speed_is_the_rule_applied_to_its_reference(entry: GpuSpec) -> None:
    e = entry
    if e.speed_from is None:
        return
    ref = GPU_CATALOG.by_name[e.speed_from]
    assert ref.speed_from is None  # derived from a cited speed, not from a derivation
    expected = ref.speed * ((e.fp16_tflops / ref.fp16_tflops) * (e.mem_gbs / ref.mem_gbs)) ** 0.5
    assert e.speed == pytest.approx(expected, abs=0.005)


def test_the_h200_speed_agrees_with_its_measured_resnet50() -> None:
    # Issue 27: ResNet-50 in TF32 at 3,011 img/s on an H200, against the V100's 412
    # img/s (controller/model/catalog/entries.py): 7.3x.
    assert GPU_CATALOG.by_name["H200-SXM-141GB"].speed == pytest.approx(3011 / 412, rel=0.05)


def test_relative_speed_uses_what_is_known() -> None:
    assert relative_speed(2.0, 4.0, 1.0) == pytest.approx(4.0)
    assert relative_speed(2.0, None, 0.5) == pytest.approx(1.0)
    assert relative_speed(2.0, None, None) == 2.0


@pytest.mark.parametrize(
    ("capability", "reference"),
    [
        ((9, 0), "H100-SXM5-80GB"),
        ((8, 0), "A100-SXM4-40GB"),
        ((8, 9), "A10-24GB"),  # Ada: no cited part, the nearest Ampere one
        ((7, 5), "T4-16GB"),
        ((12, 0), "H100-SXM5-80GB"),  # a newer architecture: the newest cited part
        (None, "V100-SXM2-16GB"),  # nothing known: the unit of speed
    ],
)
def test_an_unknown_gpu_is_compared_with_the_nearest_cited_part(
    capability: tuple[int, int] | None, reference: str
) -> None:
    assert GPU_CATALOG.reference_for(capability).name == reference
