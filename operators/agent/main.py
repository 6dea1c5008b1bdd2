"""The node agent's loop (`gpuflow agent run`): publish this node's GPUs on its Node,
and enforce the egress rates the operator gives the pods on it.

Once at start: the static GPU annotation (`gpuflow.dev/gpus`), the GPU Feature
Discovery labels, the Node condition `GpuModelUnknown` (True, with a warning in
the log, when the GPU is not in gpuflow's catalogue and its speed was derived from
NVML's figures) and the extended resource `gpuflow.dev/gpu-share` (100 per GPU) in
the Node's capacity and allocatable; then every `interval_s` the health and utilisation
annotation (`gpuflow.dev/gpu-status`: each GPU's health, utilisation and memory, and
under "pods" each pod's use of its GPUs from NVML's per-process figures,
operators/agent/gpu_use.py, which the operator's views read).
GPUs come from NVML (pynvml, package nvidia-ml-py) or from `--topology-file`. Where
NVML is absent the agent says so in one line and exits with EXIT_NO_NVML.

Beside it, a watch on the pods bound to the node (field selector spec.nodeName)
wakes the egress step (operators/agent/egress.py) at every change, and the loop
runs it every `interval_s` too: it shapes each pod to its `gpuflow.dev/egress-gbps`
on the node's interface (the NIC's speed as the link rate) and reports what it
applied on the Node.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from controller.model.sharing import DEFAULT_SHARING, SharingMode
from operators import crd
from operators.agent.bandwidth import DEFAULT_LEAF_QDISC, BandwidthEnforcer
from operators.agent.discovery import discover, gpu_status
from operators.agent.egress import EgressAgent, default_route_interface
from operators.agent.gpu_use import GpuUseMeter
from operators.agent.topology_file import TopologyFileError, load_topology_file
from operators.kube import (
    API_ERRORS,
    NOT_FOUND,
    KubeApi,
    KubeConfigError,
    Obj,
    Resource,
    api_client,
    error_message,
    status_code,
)
from operators.kube.informer import Informer
from operators.nodes import NodeGpus

log = logging.getLogger(__name__)

EXIT_API = 1
EXIT_USAGE = 2
EXIT_NO_NVML = 3
# How soon the loop notices `stop` while it waits for a pod change or its interval.
STOP_CHECK_S = 0.5
# The pod watch's timeout: the apiserver's default --min-request-timeout (1800 s) is
# longer than needed to spread reconnects; kube-proxy and kubelet re-watch every
# 5-10 min.
POD_WATCH_TIMEOUT_S = 300


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
    enforce_bandwidth: bool = True  # False: report the pods' rates, run no tc
    interface: str | None = None  # None: the default route's device
    netns: str | None = None  # the interface's network namespace; None: the agent's
    leaf_qdisc: str = DEFAULT_LEAF_QDISC  # each pod class's queue ("pfifo" everywhere)
    sharing: SharingMode = DEFAULT_SHARING  # how the node runs shared GPUs (MPS or not)
    proc_root: str = "/proc"  # the host's /proc: a GPU process's cgroup names its pod


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


def node_patch(
    info: NodeGpus,
    status: list[dict[str, Any]] | None,
    pods: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The Node's labels and GPU annotations; `status` each GPU's health and use,
    `pods` each pod's use of the GPUs (GpuUseMeter.read), where NVML gives them."""
    ann = {crd.ANN_NODE_GPUS: info.to_annotation()}
    if status is not None:
        doc: dict[str, Any] = {"time": int(time.time()), "gpus": status}
        if pods is not None:
            doc["pods"] = pods
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
                Path(options.topology_file), options.node_name, options.node_type, options.sharing
            )
            nvml = None
        else:
            nvml = nvml if nvml is not None else load_nvml()
            info = discover(nvml, options.nic_gbps, options.sharing)
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
    missing = _node_missing(api, options.node_name)
    if missing is not None:
        return missing
    if info.unknown:
        log.warning("%s", info.unknown)
    _report_model(api, options.node_name, info)
    stop = stop or threading.Event()
    meter = None
    if nvml is not None:
        meter = GpuUseMeter(nvml, Path(options.proc_root))
    egress = EgressAgent(api, options.node_name, _enforcer_factory(options, info.nic_gbps))
    wake = threading.Event()
    on_node = f"spec.nodeName={options.node_name}"
    pods = Informer(
        api,
        Resource("pods", field_selector=on_node),
        wake.set,
        watch_timeout_s=POD_WATCH_TIMEOUT_S,
    )
    if options.once:
        pods.relist()
        _publish(api, options.node_name, info, nvml, meter, pods.items())
        egress.step(pods.items())
        return 0
    threading.Thread(target=pods.run, args=(stop,), name="pods", daemon=True).start()
    next_publish_s = 0.0
    while not stop.is_set():
        if time.monotonic() >= next_publish_s:
            bound = pods.items() if pods.synced.is_set() else []
            _publish(api, options.node_name, info, nvml, meter, bound)
            next_publish_s = time.monotonic() + options.interval_s
            wake.set()  # the egress step runs every interval too: a failed apply retries
        if wake.is_set():
            wake.clear()
            if pods.synced.is_set():
                egress.step(pods.items())
        wake.wait(min(STOP_CHECK_S, max(0.0, next_publish_s - time.monotonic())))
    return 0


def _node_missing(api: KubeApi, node_name: str) -> int | None:
    """The exit code, after one line, when the node is not there to publish on (a
    mistyped --node-name or NODE_NAME) or the API cannot say; None when it is."""
    try:
        api.get_node(node_name)
    except API_ERRORS as exc:
        if status_code(exc) == NOT_FOUND:
            sys.stderr.write(
                f"gpuflow agent: error: node {node_name!r} not found "
                "(--node-name or NODE_NAME must name a Node of the cluster)\n"
            )
            return EXIT_USAGE
        sys.stderr.write(
            f"gpuflow agent: error: cannot read node {node_name!r}: {error_message(exc)}\n"
        )
        return EXIT_API
    return None


def _publish(
    api: KubeApi,
    node_name: str,
    info: NodeGpus,
    nvml: Any,
    meter: GpuUseMeter | None,
    pods: list[Obj],
) -> None:
    status = gpu_status(nvml) if nvml is not None else _all_healthy(info)
    use = meter.read(pods) if meter is not None else None
    api.patch_node(node_name, node_patch(info, status, use))
    log.info("published %d GPU(s) on node %s", len(info.gpus), node_name)


def gpu_model_condition(info: NodeGpus, now: datetime) -> dict[str, Any]:
    """The `GpuModelUnknown` condition for the node's GPUs, as Node.status holds it."""
    when = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if info.unknown:
        status, reason, message = "True", "NotInCatalogue", info.unknown
    else:
        status, reason = "False", "InCatalogue"
        message = f"GPU {info.product!r} is {info.gpu_type.name} in gpuflow's GPU catalogue"
    return {
        "type": crd.CONDITION_GPU_UNKNOWN,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": when,
        "lastTransitionTime": when,
    }


def share_capacity(info: NodeGpus) -> dict[str, str]:
    """The node's GPU shares as an extended resource (gpuflow.dev/gpu-share, hundredths
    of a GPU): what a worker pod holding a share of a GPU requests (operators/pods/__init__.py
    `gpu_requests`), which no device plugin publishes."""
    return {crd.RESOURCE_GPU_SHARE: str(len(info.gpus) * crd.GPU_SHARE_UNITS)}


def _report_model(api: KubeApi, node_name: str, info: NodeGpus) -> None:
    """Set the node's GpuModelUnknown condition and its GPU shares' capacity and
    allocatable (as Kubernetes' "advertise extended resources for a node" does; the
    kubelet keeps both); a refusal is logged, not fatal (the GPUs are published all
    the same)."""
    condition = gpu_model_condition(info, datetime.now(UTC))
    shares = share_capacity(info)
    status = {"conditions": [condition], "capacity": shares, "allocatable": shares}
    try:
        api.patch_node_status(node_name, {"status": status})
    except API_ERRORS as exc:
        log.warning(
            "cannot set condition %s and %s on node %s: %s",
            condition["type"],
            crd.RESOURCE_GPU_SHARE,
            node_name,
            error_message(exc),
        )


def _enforcer_factory(
    options: AgentOptions, nic_gbps: float
) -> Callable[[], BandwidthEnforcer] | None:
    """What builds the node's enforcer on first need (None: report only). The link
    class is the NIC's speed, so that pods and other traffic together fit the NIC."""
    if not options.enforce_bandwidth:
        return None

    def make() -> BandwidthEnforcer:
        dev = options.interface or default_route_interface(options.netns)
        leaf = options.leaf_qdisc
        return BandwidthEnforcer(dev, netns=options.netns, link_rate_gbps=nic_gbps, leaf_qdisc=leaf)

    return make


def _all_healthy(info: NodeGpus) -> list[dict[str, Any]]:
    return [{"uuid": g.uuid, "healthy": True} for g in info.gpus]
