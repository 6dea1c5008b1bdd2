"""A fake of the pynvml functions the node agent calls: a DGX-1 with 8 V100s.

The NVML boundary is the one place a fake stands in (no GPU on CI). The topology is
NVIDIA's DGX-1 V100 hybrid cube-mesh (controller/presets/dgx1-v100.yaml): six NVLink
lanes per GPU, GPUs 0-3 on CPU 0 and 4-7 on CPU 1, pairs behind one PCIe switch.
`FakeNvml(missing=True)` behaves as a node without the driver; `product` and
`figures` make its GPUs another model (the name NVML reports, and what it says of the
GPU's compute capability, cores, clocks, memory bus and PCIe generation; a figure
left out raises NVMLError_NotSupported, as on drivers that cannot say).

Health: each GPU's temperature (nvmlDeviceGetTemperature, degrees C), power draw
(nvmlDeviceGetPowerUsage, milliwatts), memory used (nvmlDeviceGetMemoryInfo, bytes)
and uncorrected ECC errors (nvmlDeviceGetTotalEccErrors) are settable per GPU; a GPU
in `no_ecc` or `no_power` raises NVMLError_NotSupported for that reading, as pynvml
does on GPUs without ECC (consumer parts) or without a power sensor, and one in
`lost` raises NVMLError_GpuIsLost from its utilisation and memory, as a GPU fallen off
the bus does.

Processes: `run(gpu, pid, mem_bytes, samples)` puts a process on a GPU, with its
utilisation samples ((timestamp in microseconds, smUtil percent), ...). The three
per-process functions behave as pynvml's (nvidia-ml-py 13, pynvml.py) over the NVML
API reference: the running-process lists return objects with `pid` and
`usedGpuMemory` (bytes, None where NVML says NVML_VALUE_NOT_AVAILABLE), [] for none;
nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp) returns the samples with a
timestamp above lastSeenTimeStamp (0: all kept), each with pid, timeStamp, smUtil,
memUtil, encUtil, decUtil, and raises NVMLError_NotFound when there is none
("NVML_ERROR_NOT_FOUND if sample entries are not found"); `process_samples=False`
makes it raise NVMLError_NotSupported, as on GPUs that keep no samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NVML_NVLINK_MAX_LINKS = 18
NVML_FEATURE_ENABLED = 1
NVML_FEATURE_DISABLED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SYSTEM = 10, 40, 50

# nvidia-smi topo -m of a DGX-1 V100: lanes between GPU pairs.
DGX1_LANES = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip
# nvmlDeviceGetMemoryInfo's total on real boards, below their datasheet's figure (the
# GPU catalogue's): a V100-SXM2-16GB's 16,945,512,448 bytes (16,160 MiB of 16,384);
# the H200 of issue 27 (driver 580) 143,771 MiB of 144,384.
V100_MEM = 16_945_512_448
H200_MEM = 143_771 * 1024**2
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_TEMPERATURE_GPU = 0
# An idle V100-SXM2's readings as nvidia-smi shows them: ~40 C, ~60 W; 512 MiB used
# by the driver's context.
IDLE_TEMPERATURE_C = 40
IDLE_POWER_MW = 60_000
IDLE_MEM_USED = 512 * 1024**2


@dataclass(frozen=True)
class GpuFigures:
    """What NVML says of a GPU beside its name (None: not supported)."""

    compute_capability: tuple[int, int] | None = None
    cores: int | None = None
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    bus_bits: int | None = None
    pcie_gen: int | None = None
    mem_bytes: int = V100_MEM


# A Tesla V100-SXM2-16GB as nvidia-smi -q reports it: 5,120 cores, 1,530 MHz SM and
# 877 MHz memory maximum clocks, a 4,096-bit HBM2 bus, PCIe Gen3.
V100_FIGURES = GpuFigures((7, 0), 5120, 1530, 877, 4096, 3)


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


@dataclass
class _Process:
    """pynvml's friendly object for an nvmlProcessInfo_t (v3 fields)."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF  # not on a MIG instance
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class _Sample:
    """An nvmlProcessUtilizationSample_t's fields."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0
    encUtil: int = 0
    decUtil: int = 0


@dataclass
class _Mem:
    total: int
    used: int
    free: int


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Pci:
    busId: bytes


class FakeNvml:
    """Module-like object: pass it where discovery takes `nvml`."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM

    def __init__(
        self,
        *,
        missing: bool = False,
        ecc_errors: dict[int, int] | None = None,
        product: str = "Tesla V100-SXM2-16GB",
        figures: GpuFigures = V100_FIGURES,
        process_samples: bool = True,
        temperature_c: dict[int, int] | None = None,
        power_mw: dict[int, int] | None = None,
        mem_used: dict[int, int] | None = None,
        no_ecc: frozenset[int] = frozenset(),
        no_power: frozenset[int] = frozenset(),
        lost: frozenset[int] = frozenset(),
    ) -> None:
        self.missing = missing
        self.ecc_errors = ecc_errors or {}
        self.temperature_c = temperature_c or {}
        self.power_mw = power_mw or {}
        self.mem_used = mem_used or {}
        self.no_ecc = no_ecc
        self.no_power = no_power
        self.lost = lost
        self.product = product
        self.figures = figures
        self.process_samples = process_samples
        self.compute: dict[int, list[_Process]] = {}
        self.graphics: dict[int, list[_Process]] = {}
        self.samples: dict[int, list[_Sample]] = {}
        self.initialised = False
        self.calls: list[str] = []
        self._peers: dict[int, list[int]] = {i: [] for i in range(8)}
        for (a, b), lanes in sorted(DGX1_LANES.items()):
            self._peers[a] += [b] * lanes
            self._peers[b] += [a] * lanes

    def _check(self, name: str) -> None:
        self.calls.append(name)
        if not self.initialised:
            raise NVMLError("Uninitialized")

    def nvmlInit(self) -> None:
        if self.missing:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._check("count")
        return 8

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self._check("handle")
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.product.encode()

    def _figure(self, value: Any) -> Any:
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        value: tuple[int, int] = self._figure(self.figures.compute_capability)
        return value

    def nvmlDeviceGetNumGpuCores(self, h: int) -> int:
        return int(self._figure(self.figures.cores))

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        f = self.figures
        return int(self._figure(f.sm_mhz if clock == NVML_CLOCK_SM else f.mem_mhz))

    def nvmlDeviceGetMemoryBusWidth(self, h: int) -> int:
        return int(self._figure(self.figures.bus_bits))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._figure(self.figures.pcie_gen))

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake0000-0000-0000-0000-00000000000{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> _Mem:
        if h in self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        total = self.figures.mem_bytes
        used = self.mem_used.get(h, IDLE_MEM_USED)
        return _Mem(total, used, total - used)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError("Invalid Argument")
        return self.temperature_c.get(h, IDLE_TEMPERATURE_C)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h in self.no_power:
            raise NVMLError_NotSupported("Not Supported")
        return self.power_mw.get(h, IDLE_POWER_MW)

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return 0 if h < 4 else 1

    def nvmlDeviceGetPciInfo(self, h: int) -> _Pci:
        return _Pci(f"00000000:{0x06 + h * 0x10:02X}:00.0".encode())

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._check("nvlink")
        if link >= 6:
            raise NVMLError_NotSupported("Not Supported")  # V100: six links
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> _Pci:
        return self.nvmlDeviceGetPciInfo(self._peers[h][link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        if a // 2 == b // 2:
            return NVML_TOPOLOGY_SINGLE
        return NVML_TOPOLOGY_NODE if a // 4 == b // 4 else NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetUtilizationRates(self, h: int) -> _Util:
        if h in self.lost:
            raise NVMLError_GpuIsLost("GPU is lost")
        return _Util(gpu=10 * h, memory=5)

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        if h in self.no_ecc:
            raise NVMLError_NotSupported("Not Supported")
        return self.ecc_errors.get(h, 0)

    # -- processes ---------------------------------------------------------------------

    def run(
        self,
        gpu: int,
        pid: int,
        mem_bytes: int | None,
        samples: tuple[tuple[int, int], ...] = (),
        *,
        graphics: bool = False,
    ) -> None:
        """Put process `pid` on GPU `gpu` with its (timestamp µs, smUtil %) samples."""
        table = self.graphics if graphics else self.compute
        table.setdefault(gpu, []).append(_Process(pid, mem_bytes))
        self.sample(gpu, pid, samples)

    def sample(self, gpu: int, pid: int, samples: tuple[tuple[int, int], ...]) -> None:
        """More (timestamp µs, smUtil %) samples of a process on GPU `gpu`."""
        self.samples.setdefault(gpu, []).extend(_Sample(pid, t, u) for t, u in samples)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[_Process]:
        self._check("compute processes")
        return list(self.compute.get(h, []))

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[_Process]:
        self._check("graphics processes")
        return list(self.graphics.get(h, []))

    def nvmlDeviceGetProcessUtilization(self, h: int, timeStamp: int) -> list[_Sample]:
        self._check("process utilisation")
        if not self.process_samples:
            raise NVMLError_NotSupported("Not Supported")
        newer = [s for s in self.samples.get(h, []) if s.timeStamp > timeStamp]
        if not newer:
            raise NVMLError_NotFound("Not Found")
        return newer


def fake_module(**kwargs: Any) -> FakeNvml:
    return FakeNvml(**kwargs)
