"""Every resource-aware packer by name: FGD's (`experiments.packing.placers`) and
gpuflow's `fgd-cpu-aware` (`experiments.packing.aware`), named apart from the
replay's `fragmentation-aware` placer (`controller.placement`).

Read by `experiments.packing.experiment` and `gpuflow placement` (an unknown name is
an error there, at start-up).
"""

from __future__ import annotations

from experiments.packing.aware import CpuAwareFgdPacker
from experiments.packing.placers import FGD_PACKERS, PackerFactory

PACKERS: dict[str, PackerFactory] = {
    **FGD_PACKERS,
    CpuAwareFgdPacker.name: CpuAwareFgdPacker,
}
