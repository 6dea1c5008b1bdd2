"""The GPU product names NVML reports, each with the GPU catalogue entry it is
(controller.model.gpus): the table tests/controller/model/test_gpus.py and
tests/operators/test_agent.py check the catalogue and the node agent against.
"""

from __future__ import annotations

# The product names as nvmlDeviceGetName returns them (and `nvidia-smi -L` prints
# them), from NVIDIA's open-gpu-kernel-modules README (560.31.02, "Compatible GPUs"),
# Runpod's GPU type IDs and nvidia-smi output; written out here rather than read from
# the catalogue, so that a renamed or missing product fails.
NVML_NAMES = {
    "Tesla K80": "K80",
    "Tesla P100-PCIE-16GB": "P100-PCIE-16GB",
    "Tesla V100-SXM2-16GB": "V100-SXM2-16GB",
    "Tesla V100-SXM2-32GB": "V100-SXM2-32GB",
    "Tesla V100-PCIE-16GB": "V100-PCIE-16GB",
    "Tesla V100-PCIE-32GB": "V100-PCIE-32GB",
    "Tesla T4": "T4-16GB",
    "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A100-PCIE-40GB": "A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe": "A100-PCIE-80GB",
    "NVIDIA A30": "A30-24GB",
    "NVIDIA A10": "A10-24GB",
    "NVIDIA A40": "A40-48GB",
    "NVIDIA RTX A6000": "RTX-A6000-48GB",
    "NVIDIA GeForce RTX 3090": "RTX-3090-24GB",
    "NVIDIA L4": "L4-24GB",
    "NVIDIA L40": "L40-48GB",
    "NVIDIA L40S": "L40S-48GB",
    "NVIDIA GeForce RTX 4090": "RTX-4090-24GB",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada-48GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB",
    "NVIDIA H100 PCIe": "H100-PCIE-80GB",
    "NVIDIA H100 NVL": "H100-NVL-94GB",
    "NVIDIA H200": "H200-SXM-141GB",
    "NVIDIA H200 NVL": "H200-NVL-141GB",
    "NVIDIA H20": "H20-96GB",
    "NVIDIA B200": "B200-SXM-180GB",
}
