"""The node agent's loop (`gpuflow agent run`): publish this node's GPUs on its Node.

Once at start: the static GPU annotation (`gpuflow.dev/gpus`) and the GPU Feature
Discovery labels; then every `interval_s` the health and utilisation annotation.
GPUs come from NVML (pynvml, package nvidia-ml-py) or from `--topology-file`. Where
NVML is absent the agent says so in one line and exits with EXIT_NO_NVML.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators import crd
from operators.agent.discovery import discover, gpu_status
from operators.agent.topology_file import TopologyFileError, load_topology_file
from operators.kube import KubeApi, KubeConfigError, api_client
from operators.nodes import NodeGpus

log = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_NO_NVML = 3


@dataclass(frozen=True)
class AgentOptions:
    node_name: str | None
    kubeconfig: str | None = None
    context: str | None = None
    topology_file: str | None = None
    node_type: str | None = None
    nic_gbps: float = 100.0
    interval_s: float = 30.0
    once: bool = False


class NvmlMissing(RuntimeError):
    pass


def load_nvml() -> Any:
    """The pynvml module, initialised; NvmlMissing with one line if it cannot be."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        raise NvmlMissing("pynvml is not installed (pip install nvidia-ml-py)") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlMissing(f"NVML unavailable ({exc}); no NVIDIA driver on this node?") from None
    return nvml


def node_patch(info: NodeGpus, status: list[dict[str, Any]] | None) -> dict[str, Any]:
    ann = {crd.ANN_NODE_GPUS: info.to_annotation()}
    if status is not None:
        doc = {"time": int(time.time()), "gpus": status}
        ann[crd.ANN_NODE_GPU_STATUS] = json.dumps(doc, separators=(",", ":"))
    return {"metadata": {"labels": info.labels(), "annotations": ann}}


def run_agent(
    options: AgentOptions,
    *,
    nvml: Any = None,
    api: KubeApi | None = None,
    stop: threading.Event | None = None,
) -> int:
    if not options.node_name:
        sys.stderr.write("gpuflow agent: error: no node name (--node-name or NODE_NAME)\n")
        return EXIT_USAGE
    try:
        if options.topology_file:
            info = load_topology_file(
                Path(options.topology_file), options.node_name, options.node_type
            )
            nvml = None
        else:
            nvml = nvml if nvml is not None else load_nvml()
            info = discover(nvml, options.nic_gbps)
    except NvmlMissing as exc:
        sys.stderr.write(f"gpuflow agent: error: {exc}; use --topology-file without GPUs\n")
        return EXIT_NO_NVML
    except TopologyFileError as exc:
        sys.stderr.write(f"gpuflow agent: error: {exc}\n")
        return EXIT_USAGE
    if api is None:
        try:
            api = KubeApi(api_client(options.kubeconfig, options.context))
        except KubeConfigError as exc:
            sys.stderr.write(f"gpuflow agent: error: {exc}\n")
            return EXIT_USAGE
    stop = stop or threading.Event()
    while True:
        status = gpu_status(nvml) if nvml is not None else _all_healthy(info)
        api.patch_node(options.node_name, node_patch(info, status))
        log.info("published %d GPU(s) on node %s", len(info.gpus), options.node_name)
        if options.once or stop.wait(options.interval_s):
            return 0


def _all_healthy(info: NodeGpus) -> list[dict[str, Any]]:
    return [{"uuid": g.uuid, "healthy": True} for g in info.gpus]
