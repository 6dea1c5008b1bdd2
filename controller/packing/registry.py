"""Every resource-aware packer by name: FGD's (`controller.packing.placers`) and
gpuflow's `fragmentation-aware` (`controller.packing.aware`).

Read by `controller.packing.experiment` and `gpuflow placement` (an unknown name is
an error there, at start-up).
"""

from __future__ import annotations

from controller.packing.aware import FragmentationAwarePacker
from controller.packing.placers import FGD_PACKERS, PackerFactory

PACKERS: dict[str, PackerFactory] = {
    **FGD_PACKERS,
    FragmentationAwarePacker.name: FragmentationAwarePacker,
}
