"""Nodes' GPUs as the node agent publishes them, and the `Cluster` the operator builds.

The agent (operators/agent) discovers a `NodeGpus` and writes it on its Node as the
JSON annotation `gpuflow.dev/gpus` (static: model, UUIDs, NUMA, the pair matrix in
`nvidia-smi topo -m` labels, the sharing mode), GPU-Feature-Discovery-like labels,
and a changing `gpuflow.dev/gpu-status` annotation (health, utilisation, and each
pod's use of its GPUs). The backend turns the Nodes that carry the annotation into a
`Cluster`, nodes sorted by name, racks from the `gpuflow.dev/rack` label (else the
zone label), rack uplinks non-blocking, and each node's allocatable CPU and memory
(`status.allocatable`) and its pods' GPU use (`pod_gpu_use`) beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from controller.model import Cluster, Gpu, GpuType, GpuUse, Node, PairLink, Rack
from controller.model.cluster import parse_topology_matrix
from controller.model.gpus import PCIE_X16_GBPS
from controller.model.sharing import DEFAULT_SHARING, SharingMode
from operators import crd
from operators.dljobs.requests import Requests, node_allocatable
from operators.kube import Obj

Links = tuple[tuple[PairLink | None, ...], ...]
SCHEMA_VERSION = 1
DEFAULT_RACK = "default"
ZONE_LABEL = "topology.kubernetes.io/zone"
# PCIe Gen3 x16, one direction (controller.model.gpus): for a GPU whose NVML gives no
# PCIe generation.
DEFAULT_PCIE_GBPS = PCIE_X16_GBPS[3]
# One NVLink 2-4 lane, one direction (controller/model/gpus/entries.py): for a GPU the
# catalogue lacks that has NVLink pairs.
DEFAULT_NVLINK_GBPS = 200.0
DEFAULT_NIC_GBPS = 100.0
# A pod measured at 0 % (no kernel in the samples: stalled on input, or between
# phases) is taken as 1 %: JobSpec.gpu_util must be above 0, and the sharing model
# divides by it.
MIN_MEASURED_UTIL = 0.01
NodeState = Literal["ready", "cordoned", "draining", "down"]


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs: what the agent publishes and the operator reads. `unknown`
    says why the model's figures are not the GPU catalogue's (None: they are); it is
    the agent's, published as a Node condition, not in the annotation."""

    gpu_type: GpuType
    gpus: tuple[Gpu, ...]
    links: Links
    nic_gbps: float
    product: str  # the name NVML reports, e.g. "Tesla V100-SXM2-16GB"
    unknown: str | None = None
    sharing: SharingMode = DEFAULT_SHARING

    def to_annotation(self) -> str:
        t = self.gpu_type
        doc = {
            "version": SCHEMA_VERSION,
            "model": t.name,
            "product": self.product,
            "memMib": t.mem_mib,
            "nvlinkGbps": t.nvlink_gbps,
            "pcieGbps": t.pcie_gbps,
            "speed": t.speed,
            "nicGbps": self.nic_gbps,
            "sharing": str(self.sharing),
            "gpus": [{"index": g.index, "uuid": g.uuid, "numa": g.numa} for g in self.gpus],
            "topology": [
                " ".join("X" if c is None else c.label() for c in row) for row in self.links
            ],
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str) -> NodeGpus:
        doc = json.loads(text)
        if doc.get("version") != SCHEMA_VERSION:
            raise ValueError(f"unknown {crd.ANN_NODE_GPUS} version {doc.get('version')}")
        t = GpuType(
            doc["model"],
            int(doc["memMib"]),
            float(doc["nvlinkGbps"]),
            float(doc["pcieGbps"]),
            float(doc.get("speed", 1.0)),
        )
        gpus = tuple(Gpu(int(g["index"]), str(g["uuid"]), int(g["numa"])) for g in doc["gpus"])
        links = _links(tuple(doc["topology"]))
        if len(links) != len(gpus):
            raise ValueError(f"{len(gpus)} GPUs but a {len(links)}-row topology")
        sharing = SharingMode(doc.get("sharing", DEFAULT_SHARING))
        product = str(doc.get("product", t.name))
        return cls(t, gpus, links, float(doc["nicGbps"]), product, sharing=sharing)

    def labels(self) -> dict[str, str]:
        """GPU Feature Discovery's labels (count, product, memory in MiB)."""
        return {
            crd.LABEL_GPU_COUNT: str(len(self.gpus)),
            crd.LABEL_GPU_PRODUCT: _label_value(self.product),
            crd.LABEL_GPU_MEMORY: str(self.gpu_type.mem_mib),
        }


@cache
def _links(rows: tuple[str, ...]) -> Links:
    return parse_topology_matrix("\n".join(rows))


def _label_value(text: str) -> str:
    """A valid label value: GFD writes products with '-' for spaces."""
    out = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)
    return out.strip("-_.")[:63]


@dataclass(frozen=True)
class ClusterView:
    """The cluster now: the model, and what is down or unhealthy in it."""

    cluster: Cluster
    down_nodes: frozenset[int]
    unhealthy: frozenset[tuple[int, int]]  # (node, gpu) reported unhealthy
    signature: tuple[Any, ...]  # equal signatures: the same Cluster
    # CPU and memory of each node that reports status.allocatable; others unconstrained.
    allocatable: Mapping[str, Requests] = field(default_factory=dict)
    # Cordoned (spec.unschedulable, as `kubectl cordon` sets it): no new GPUs there.
    cordoned_nodes: frozenset[int] = frozenset()
    # Draining (the gpuflow.dev/drain annotation): node -> who and when.
    draining: Mapping[int, str] = field(default_factory=dict)
    # Pod key ("namespace/name") -> its use of its GPUs, as its node's agent last
    # reported it (gpu-status "pods": operators/agent/gpu_use.py).
    pod_use: Mapping[str, GpuUse] = field(default_factory=dict)

    def state_of(self, node: int) -> NodeState:
        """ "down", "draining", "cordoned" or "ready" (down wins over the others)."""
        if node in self.down_nodes:
            return "down"
        if node in self.draining:
            return "draining"
        return "cordoned" if node in self.cordoned_nodes else "ready"

    def uuid_index(self) -> dict[str, tuple[int, int]]:
        """GPU UUID -> (node index, GPU index); built once per Cluster (a Cluster's
        hash walks all its nodes, so it is not a cache key: a round asks per job)."""
        return _UUID_INDEX.of(self.cluster)

    def could_hold(self, requests: Requests, gpu_models: frozenset[str] = frozenset()) -> bool:
        """Whether some node that is up, with GPUs of one of `gpu_models` (empty: any),
        could ever hold one pod requesting `requests` (with nothing else on it): False
        means no worker pod of the job can start."""
        for i, node in enumerate(self.cluster.nodes):
            if i in self.down_nodes or (gpu_models and node.gpu_type.name not in gpu_models):
                continue
            alloc = self.allocatable.get(node.name)
            if alloc is None or (
                requests.cpu_milli <= alloc.cpu_milli and requests.mem_mib <= alloc.mem_mib
            ):
                return True
        return False


class _UuidIndex:
    """The GPU index of the last Cluster asked about, recognised by identity (the
    backend keeps one Cluster while no node's GPUs change: operators/backend.py)."""

    def __init__(self) -> None:
        self._last: tuple[Cluster, dict[str, tuple[int, int]]] | None = None

    def of(self, cluster: Cluster) -> dict[str, tuple[int, int]]:
        last = self._last
        if last is not None and last[0] is cluster:
            return last[1]
        index = {g.uuid: (i, g.index) for i, n in enumerate(cluster.nodes) for g in n.gpus}
        self._last = (cluster, index)
        return index


_UUID_INDEX = _UuidIndex()


def build_cluster(nodes: Iterable[Obj], previous: ClusterView | None = None) -> ClusterView:
    """The cluster from Nodes carrying the GPU annotation; reuses `previous`'s Cluster
    when no node's GPUs, rack or presence changed."""
    gpu_nodes = sorted(
        (n for n in nodes if crd.ANN_NODE_GPUS in _annotations(n)),
        key=lambda n: str(n["metadata"]["name"]),
    )
    signature = tuple(
        (n["metadata"]["name"], _annotations(n)[crd.ANN_NODE_GPUS], _rack_of(n)) for n in gpu_nodes
    )
    if previous is not None and previous.signature == signature:
        cluster = previous.cluster
    else:
        cluster = _assemble(signature)
    down = frozenset(i for i, n in enumerate(gpu_nodes) if not _node_up(n))
    unhealthy: set[tuple[int, int]] = set()
    for i, n in enumerate(gpu_nodes):
        unhealthy.update((i, g) for g in _unhealthy_gpus(n, cluster.nodes[i]))
    allocatable = {
        str(n["metadata"]["name"]): a for n in gpu_nodes if (a := node_allocatable(n)) is not None
    }
    cordoned = frozenset(i for i, n in enumerate(gpu_nodes) if _cordoned(n))
    draining = {
        i: _annotations(n)[crd.ANN_NODE_DRAIN]
        for i, n in enumerate(gpu_nodes)
        if crd.ANN_NODE_DRAIN in _annotations(n)
    }
    pod_use: dict[str, GpuUse] = {}
    for n in gpu_nodes:
        pod_use.update(pod_gpu_use(n))
    return ClusterView(
        cluster,
        down,
        frozenset(unhealthy),
        signature,
        allocatable,
        cordoned | set(draining),
        draining,
        pod_use,
    )


def pod_gpu_use(node: Obj) -> dict[str, GpuUse]:
    """The pods' GPU use the node's agent reported in gpu-status (GpuUseMeter.read):
    utilisation alone where measured (`aloneUtilPct`, percent), memory, whether alone
    now. A malformed report is read as none: figures never stop a round."""
    text = _annotations(node).get(crd.ANN_NODE_GPU_STATUS)
    if not text:
        return {}
    try:
        doc = json.loads(text)
        reported_s = float(doc["time"])
        out = {}
        for key, fig in (doc.get("pods") or {}).items():
            pct = fig.get("aloneUtilPct")
            util = None if pct is None else min(1.0, max(MIN_MEASURED_UTIL, float(pct) / 100))
            out[str(key)] = GpuUse(util, int(fig["memMib"]), bool(fig["alone"]), reported_s)
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}
    return out


def _assemble(signature: Sequence[tuple[str, str, str]]) -> Cluster:
    rack_names = sorted({rack for _, _, rack in signature})
    rack_index = {r: i for i, r in enumerate(rack_names)}
    nodes: list[Node] = []
    nic_by_rack = dict.fromkeys(rack_names, 0.0)
    for name, text, rack in signature:
        info = NodeGpus.from_annotation(text)
        nodes.append(
            Node(
                name,
                rack_index[rack],
                info.gpu_type,
                info.gpus,
                info.links,
                info.nic_gbps,
                sharing=info.sharing,
            )
        )
        nic_by_rack[rack] += info.nic_gbps
    racks = tuple(Rack(r, nic_by_rack[r]) for r in rack_names)
    return Cluster("kubernetes", tuple(nodes), racks)


def _annotations(node: Obj) -> dict[str, str]:
    ann: dict[str, str] = node["metadata"].get("annotations") or {}
    return ann


def _rack_of(node: Obj) -> str:
    labels = node["metadata"].get("labels") or {}
    return str(labels.get(crd.LABEL_RACK) or labels.get(ZONE_LABEL) or DEFAULT_RACK)


def _cordoned(node: Obj) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _node_up(node: Obj) -> bool:
    """Not reported NotReady (a Node without conditions counts as up); a cordoned node
    is up: its jobs run on."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True


def _unhealthy_gpus(node: Obj, model: Node) -> list[int]:
    text = _annotations(node).get(crd.ANN_NODE_GPU_STATUS)
    if not text:
        return []
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    index = {g.uuid: g.index for g in model.gpus}
    return [
        index[g["uuid"]]
        for g in doc.get("gpus", [])
        if g.get("healthy") is False and g.get("uuid") in index
    ]
