"""GPU discovery with NVML: the node agent's view of its machine.

`discover(nvml, nic_gbps)` reads every GPU's UUID, name and memory, the pair matrix
(NVLink lanes counted per peer from nvmlDeviceGetNvLinkRemotePciInfo, NVSwitch
ports shared by all GPUs on the switch; otherwise nvmlDeviceGetTopologyCommonAncestor's
PCIe level) and each GPU's NUMA node; `gpu_status(nvml)` reads health and use.
`nvml` is the `pynvml` module (package nvidia-ml-py) or, in tests, a fake with the
same functions: this is the one place gpuflow touches NVML. Callers (agent/main.py)
must call nvmlInit first; a missing library raises NVMLError_LibraryNotFound there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from controller.model import Gpu, GpuType, PairLink, PcieLevel
from controller.spec.yaml_spec import presets
from operators.nodes import DEFAULT_NVLINK_GBPS, DEFAULT_PCIE_GBPS, NodeGpus

MIB = 1024 * 1024
NVSWITCH = "nvswitch"


def discover(nvml: Any, nic_gbps: float) -> NodeGpus:
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
    return NodeGpus(_gpu_type(product, mem_mib, has_nvlink), gpus, links, nic_gbps, product)


def gpu_status(nvml: Any) -> list[dict[str, Any]]:
    """Per GPU: UUID, healthy (no uncorrected ECC error, answers), utilisation, memory."""
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
        out.append(
            {
                "uuid": uuid,
                "healthy": _ecc_errors(nvml, h) == 0,
                "utilPct": int(util.gpu),
                "memUsedMib": int(mem.used) // MIB,
            }
        )
    return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _numa(nvml: Any, handle: Any) -> int:
    """The GPU's NUMA node (NVML >= 12.4), else 0 when the driver does not say."""
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    except (nvml.NVMLError, AttributeError):
        return 0
    return max(0, node)


def _ecc_errors(nvml: Any, handle: Any) -> int:
    try:
        return int(
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        )
    except nvml.NVMLError:
        return 0  # no ECC on this GPU (consumer parts): nothing to report


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


def _gpu_type(product: str, mem_mib: int, has_nvlink: bool) -> GpuType:
    """The catalogue's GPU type for an NVML name ("Tesla V100-SXM2-16GB"), else one
    built from what NVML says, with default link speeds."""
    name = product.removeprefix("NVIDIA ").removeprefix("Tesla ").replace(" ", "-")
    known = presets()[0]
    for key in sorted(known, key=len, reverse=True):
        if name.upper().startswith(key.upper()):
            return known[key]
    nvlink = DEFAULT_NVLINK_GBPS if has_nvlink else 0.0
    return replace(GpuType(name, mem_mib, nvlink, DEFAULT_PCIE_GBPS), mem_mib=mem_mib)
