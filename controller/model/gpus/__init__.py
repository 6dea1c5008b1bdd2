"""GPU models: the catalogue of datasheet figures (controller.model.gpus.catalog) and
its entries (controller.model.gpus.entries).

`GPU_CATALOG.find(name)` takes gpuflow's name ("H100-SXM5-80GB") or the product name
NVML reports ("NVIDIA H100 80GB HBM3"). Read by the cluster specs (controller.spec),
the node agent (operators/agent/discovery.py) and `gpuflow colocate`.
"""

from controller.model.gpus.catalog import (
    PCIE_X16_GBPS,
    GpuCatalog,
    GpuSpec,
    normalised,
    relative_speed,
)
from controller.model.gpus.entries import ENTRIES, SPEED_UNIT

GPU_CATALOG = GpuCatalog(ENTRIES, SPEED_UNIT)

__all__ = [
    "GPU_CATALOG",
    "PCIE_X16_GBPS",
    "GpuCatalog",
    "GpuSpec",
    "normalised",
    "relative_speed",
]
