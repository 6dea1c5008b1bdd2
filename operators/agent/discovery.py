"""GPU discovery with NVML: the node agent's view of its machine.

`discover(nvml, nic_gbps)` reads every GPU's UUID, name and memory, the pair matrix
(NVLink lanes counted per peer from nvmlDeviceGetNvLinkRemotePciInfo, NVSwitch
ports shared by all GPUs on the switch; otherwise nvmlDeviceGetTopologyCommonAncestor's
PCIe level) and each GPU's NUMA node; `gpu_status(nvml)` reads health and use
(utilisation, memory, temperature, power, ECC errors) at every publish.

The GPU model is the GPU catalogue's entry for the product name NVML reports
(controller.model.gpus), with the memory NVML measures in place of the catalogue's:
the catalogue's is the datasheet's, and a board has less to give (an H200's NVML
total is 143,771 MiB, the datasheet's 141 GB 144,384 MiB; docs/benchmarks.md, "The
GPU check"), so publishing the datasheet's would let a job that fits on paper fail
out of memory. A product the catalogue lacks is published with what NVML
says about it: its memory, its PCIe generation, and a speed derived from its FP32
throughput (CUDA cores x maximum SM clock) and memory bandwidth (maximum memory
clock x bus width, double data rate) against the catalogued part nearest in compute
capability (`relative_speed`); `NodeGpus.unknown` then says so, and the agent logs it
and sets the Node condition `crd.CONDITION_GPU_UNKNOWN`.
`nvml` is the `pynvml` module (package nvidia-ml-py) or, in tests, a fake with the
same functions: this is the one place gpuflow touches NVML. Callers (agent/main.py)
must call nvmlInit first; a missing library raises NVMLError_LibraryNotFound there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from controller.model import Gpu, GpuType, PairLink, PcieLevel
from controller.model.gpus import GPU_CATALOG, PCIE_X16_GBPS, relative_speed
from controller.model.sharing import DEFAULT_SHARING, SharingMode
from operators.nodes import DEFAULT_NVLINK_GBPS, DEFAULT_PCIE_GBPS, NodeGpus

MIB = 1024 * 1024
NVSWITCH = "nvswitch"
# Memory transfers twice per memory clock (DDR, and as NVML reports HBM and GDDR6X
# clocks): an H100 SXM's 2,619 MHz x 5,120 bits x 2 / 8 = 3.35 TB/s, its datasheet
# figure; a V100's 877 MHz x 4,096 bits gives 898 GB/s (900).
TRANSFERS_PER_CLOCK = 2


def discover(nvml: Any, nic_gbps: float, sharing: SharingMode = DEFAULT_SHARING) -> NodeGpus:
    """The node's GPUs as NVML sees them; `sharing` is how the node runs shared GPUs
    (the agent's --sharing: whether an MPS control daemon serves them)."""
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    product = _text(nvml.nvmlDeviceGetName(handles[0])) if handles else "none"
    mem_mib = min((int(nvml.nvmlDeviceGetMemoryInfo(h).total) // MIB for h in handles), default=0)
    gpus = tuple(
        Gpu(i, _text(nvml.nvmlDeviceGetUUID(h)), _numa(nvml, h)) for i, h in enumerate(handles)
    )
    lanes = _nvlink_lanes(nvml, handles)
    links = tuple(
        tuple(
            None if i == j else _pair(nvml, handles[i], handles[j], lanes.get((i, j), 0))
            for j in range(count)
        )
        for i in range(count)
    )
    has_nvlink = any(lanes.values())
    spec = GPU_CATALOG.find(product)
    if spec is not None:
        gpu_type = replace(spec.gpu_type(), mem_mib=mem_mib)
        return NodeGpus(gpu_type, gpus, links, nic_gbps, product, sharing=sharing)
    gpu_type, why = _derived_type(nvml, handles[0], product, mem_mib, has_nvlink)
    return NodeGpus(gpu_type, gpus, links, nic_gbps, product, unknown=why, sharing=sharing)


def gpu_status(nvml: Any) -> list[dict[str, Any]]:
    """Per GPU: UUID, healthy (no uncorrected ECC error, answers), utilisation, memory
    used and total, temperature, power draw and uncorrected ECC errors.

    A reading the GPU does not support (NVMLError_NotSupported: no ECC on consumer
    parts, no power sensor on some boards) is null, not a guess; a GPU that does not
    answer its utilisation or memory (fallen off the bus) is unhealthy with no figures.
    """
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = _text(nvml.nvmlDeviceGetUUID(h))
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        except nvml.NVMLError:
            out.append({"uuid": uuid, "healthy": False})
            continue
        ecc = _ecc_errors(nvml, h)
        power_mw = _reading(nvml, nvml.nvmlDeviceGetPowerUsage, h)
        out.append(
            {
                "uuid": uuid,
                "healthy": not ecc,
                "utilPct": int(util.gpu),
                "memUsedMib": int(mem.used) // MIB,
                "memTotalMib": int(mem.total) // MIB,
                "temperatureC": _reading(
                    nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU
                ),
                # nvmlDeviceGetPowerUsage: milliwatts, the board's draw (+/- 5 %).
                "powerW": None if power_mw is None else round(power_mw / 1000, 1),
                "eccErrors": ecc,
            }
        )
    return out


def _reading(nvml: Any, read: Callable[..., Any], *args: Any) -> int | None:
    """An integer NVML reading, None where the GPU does not support it (or fails it)."""
    try:
        return int(read(*args))
    except nvml.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _numa(nvml: Any, handle: Any) -> int:
    """The GPU's NUMA node (NVML >= 12.4), else 0 when the driver does not say."""
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    except (nvml.NVMLError, AttributeError):
        return 0
    return max(0, node)


def _ecc_errors(nvml: Any, handle: Any) -> int | None:
    """Uncorrected ECC errors since the driver loaded; None for a GPU without ECC."""
    return _reading(
        nvml,
        nvml.nvmlDeviceGetTotalEccErrors,
        handle,
        nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        nvml.NVML_VOLATILE_ECC,
    )


def _nvlink_lanes(nvml: Any, handles: list[Any]) -> dict[tuple[int, int], int]:
    """NVLink lanes per GPU pair: direct lanes counted per remote GPU; GPUs on
    NVSwitches reach each other with as many lanes as the fewer switch ports."""
    bus = {_bus_id(nvml.nvmlDeviceGetPciInfo(h)): i for i, h in enumerate(handles)}
    direct: Counter[tuple[int, int]] = Counter()
    switch_ports: Counter[int] = Counter()
    for i, h in enumerate(handles):
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(h, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link))
            except nvml.NVMLError:
                break  # no such link (or no NVLink at all)
            j = bus.get(remote)
            if j is None:
                switch_ports[i] += 1
            elif j != i:
                direct[(i, j)] += 1
    for i in switch_ports:
        for j in switch_ports:
            if i != j:
                direct[(i, j)] += min(switch_ports[i], switch_ports[j])
    return dict(direct)


def _bus_id(pci: Any) -> str:
    return _text(pci.busId).lower()


def _pair(nvml: Any, a: Any, b: Any, lanes: int) -> PairLink:
    level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    # NVML_TOPOLOGY_INTERNAL (0) only names a GPU with itself, or two halves of one board.
    return PairLink(
        lanes, PcieLevel(level) if level in PcieLevel._value2member_map_ else PcieLevel.PIX
    )


def _derived_type(
    nvml: Any, handle: Any, product: str, mem_mib: int, has_nvlink: bool
) -> tuple[GpuType, str]:
    """A GPU type for a product the catalogue lacks, from what NVML reports, and the
    sentence that says how its speed was derived."""
    cc = _ask(nvml, lambda: tuple(nvml.nvmlDeviceGetCudaComputeCapability(handle)))
    capability = (int(cc[0]), int(cc[1])) if cc else None
    ref = GPU_CATALOG.reference_for(capability)
    cores = _ask(nvml, lambda: int(nvml.nvmlDeviceGetNumGpuCores(handle)))
    sm_mhz = _ask(nvml, lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)))
    mem_mhz = _ask(nvml, lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)))
    bus_bits = _ask(nvml, lambda: int(nvml.nvmlDeviceGetMemoryBusWidth(handle)))
    gen = _ask(nvml, lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)))
    said: list[str] = []
    compute = None
    if cores and sm_mhz:
        fp32_tflops = 2 * cores * sm_mhz / 1e6
        compute = fp32_tflops / ref.fp32_tflops
        said.append(f"FP32 {fp32_tflops:.1f} TFLOPS ({cores} cores at {sm_mhz} MHz)")
    memory = None
    if mem_mhz and bus_bits:
        mem_gbs = TRANSFERS_PER_CLOCK * mem_mhz * bus_bits / 8 / 1e3
        memory = mem_gbs / ref.mem_gbs
        said.append(f"memory {mem_gbs:.0f} GB/s")
    speed = round(relative_speed(ref.speed, compute, memory), 2)
    basis = " and ".join(said) if said else "no clocks or bandwidth from NVML"
    why = (
        f"GPU {product!r} is not in gpuflow's GPU catalogue: speed {speed:g} derived from "
        f"{basis} against {ref.name} (speed {ref.speed:g})"
    )
    pcie = PCIE_X16_GBPS.get(gen or 0, DEFAULT_PCIE_GBPS)
    nvlink = DEFAULT_NVLINK_GBPS if has_nvlink else 0.0
    name = product.removeprefix("NVIDIA ").removeprefix("Tesla ").replace(" ", "-")
    return GpuType(name, mem_mib, nvlink, pcie, speed), why


def _ask(nvml: Any, read: Callable[[], Any]) -> Any:
    """What `read` returns, None when this GPU, driver or pynvml cannot say."""
    try:
        return read()
    except (nvml.NVMLError, AttributeError):
        return None
