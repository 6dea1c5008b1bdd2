"""Cluster specs: build a `Cluster` from a YAML file, a preset, a shorthand or a CSV.

Called by the CLI (`--cluster`) and by anything that needs a cluster to replay
on; `describe` gives the CLI its one-paragraph summary. See docs/clusters.md.

`load_cluster(arg)` accepts:

- a YAML cluster spec (`*.yaml`, `*.yml`; schema below);
- a preset node type: `dgx-h100`, `dgx-a100`, `dgx1-v100`, `pcie4` alone means
  one rack of 4 such nodes, `PRESET:N` means N of them (`dgx-a100:32`);
- `NODESxGPUS` (`16x4`, `256x8`): generic PCIe servers of V100-PCIe GPUs
  (`pcie_topology`), with one `GENERIC_NIC_GBPS` NIC each;
- a Tiresias simulator `cluster_spec.csv`
  (`num_switch,num_node_p_switch,num_gpu_p_node[,num_cpu_p_node,mem_p_node]`,
  one row; a switch is a rack, the nodes are generic PCIe servers);
- an Alibaba openb node list (`sn,cpu_milli,memory_mib,gpu,model`, from
  cluster-trace-gpu-v2023; nodes without GPUs are dropped).

Nodes from `PRESET:N`, shorthands and CSVs fill racks of `RACK_SIZE`, uplinks
non-blocking (oversubscription 1).

The YAML schema (bandwidths unidirectional, Gbit/s)::

    name: my-cluster                 # optional; default: the file name
    gpu_types:                       # optional; presets/gpus.yaml models are known
      MyGPU: {mem_mib: 24576, nvlink_gbps: 0, pcie_gbps: 252, speed: 0.8}
    node_types:                      # optional; preset node types are known
      mybox:
        gpu: V100-SXM2-16GB          # a known model, or a mapping: model plus any
                                     # of mem_mib, nvlink_gbps, pcie_gbps, speed
                                     # (all but speed needed for an unknown model)
        nic_gbps: 100
        gpus: 8                      # optional with a topology, else required
        numa: [0,0,0,0,1,1,1,1]      # optional; default per socket or all 0
        topology: |                  # optional `nvidia-smi topo -m` GPU matrix;
          X NV1 ...                  # default: the generic PCIe layout
    racks:
      - name: r0                     # optional; default r<index>
        oversubscription: 2          # >= 1, default 1: uplink = sum of NICs / ratio
        nodes:
          - {type: dgx-a100, count: 4, name_prefix: a}  # count 1, prefix = type

Nodes are named `<prefix>-<k>`, k counting per prefix over the whole cluster. GPU
UUIDs are deterministic fakes, `GPU-<uuid5 of cluster/node/index>`. Errors are
`ClusterSpecError`s that name the file, the line of the offending key (or the
CSV line) and the field.
"""

from __future__ import annotations

import csv
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from controller.model.cluster import (
    Cluster,
    Gpu,
    GpuType,
    Node,
    PairLink,
    PcieLevel,
    Rack,
    parse_topology_matrix,
)

Links = tuple[tuple[PairLink | None, ...], ...]

RACK_SIZE = 16  # nodes per rack for PRESET:N, NODESxGPUS and CSV clusters
PRESET_NODES = 4  # nodes of a preset named without a count
GENERIC_GPU = "V100-PCIE-16GB"
# gpuflow's choice for generic servers: one 100 Gbit/s port (EDR InfiniBand or
# 100 GbE), the common fabric of V100-era GPU clusters.
GENERIC_NIC_GBPS = 100.0
# openb `model` column -> gpuflow GPU type (presets/gpus.yaml).
OPENB_MODELS = {
    "V100M16": "V100-PCIE-16GB",
    "V100M32": "V100-PCIE-32GB",
    "P100": "P100-PCIE-16GB",
    "T4": "T4-16GB",
    "A10": "A10-24GB",
    "G2": "openb-G2",
    "G3": "openb-G3",
}
_TIRESIAS_FIELDS = ("num_switch", "num_node_p_switch", "num_gpu_p_node")
_OPENB_FIELDS = ("sn", "gpu", "model")
_GPU_FIELDS = ("mem_mib", "nvlink_gbps", "pcie_gbps", "speed")
_SHORTHAND = re.compile(r"(\d+)x(\d+)")
_PRESET_COUNT = re.compile(r"(.+):(\d+)")


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be built: `{source}:{line}: field '{field}': {message}`,
    leaving out the parts that are unknown."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message, self.source, self.line, self.field = message, source, line, field
        where = ":".join(str(p) for p in (source, line) if p is not None)
        parts = [where] if where else []
        if field:
            parts.append(f"field '{field}'")
        super().__init__(": ".join([*parts, message]))


@dataclass(frozen=True, slots=True)
class NodeType:
    """A kind of server: what every node built from it shares."""

    name: str
    gpu_type: GpuType
    links: Links
    numa: tuple[int, ...]
    nic_gbps: float


@dataclass(frozen=True, slots=True)
class _RackPlan:
    name: str
    oversubscription: float
    nodes: tuple[tuple[str, NodeType], ...]  # (node name, type)


# --- entry points -------------------------------------------------------------------------


def load_cluster(arg: str) -> Cluster:
    """Build the cluster that `arg` names: a file, a preset, `PRESET:N` or `NODESxGPUS`."""
    path = Path(arg)
    if path.suffix.lower() in {".yaml", ".yml", ".csv"} or path.is_file():
        if not path.is_file():
            raise ClusterSpecError("no such file", source=arg)
        if path.suffix.lower() == ".csv":
            return _load_csv(path)
        return _load_yaml(path)
    if m := _SHORTHAND.fullmatch(arg):
        nodes, gpus = int(m[1]), int(m[2])
        if nodes < 1 or gpus < 1:
            raise ClusterSpecError("NODESxGPUS needs at least one node and one GPU", source=arg)
        return _uniform(arg, generic_node_type(gpus), nodes)
    name, count = arg, PRESET_NODES
    if m := _PRESET_COUNT.fullmatch(arg):
        name, count = m[1], int(m[2])
        if count < 1:
            raise ClusterSpecError("PRESET:N needs N >= 1", source=arg)
    node_types = _presets()[1]
    if name not in node_types:
        raise ClusterSpecError(
            "not a file, preset or shorthand; expected a .yaml or .csv file, a preset "
            f"({', '.join(preset_names())}), PRESET:N (e.g. dgx-a100:32) "
            "or NODESxGPUS (e.g. 16x4)",
            source=arg,
        )
    return _uniform(arg, node_types[name], count, prefix=name)


def preset_names() -> list[str]:
    return sorted(_presets()[1])


def describe(cluster: Cluster) -> str:
    """A few lines for people: nodes by kind, racks by size and uplink."""
    lines = [
        f"cluster {cluster.name}: {_count(len(cluster.nodes), 'node')}, "
        f"{_count(cluster.num_gpus, 'GPU')}, {_count(len(cluster.racks), 'rack')}"
    ]
    kinds: Counter[tuple[str, int, int, float, str, float]] = Counter()
    for node in cluster.nodes:
        t = node.gpu_type
        kinds[(t.name, node.num_gpus, t.mem_mib, t.speed, _pair_kinds(node), node.nic_gbps)] += 1
    for (gpu, n, mem_mib, speed, pairs, nic), count in sorted(kinds.items()):
        inside = f", GPU pairs {pairs}" if pairs else ""
        lines.append(
            f"  {_count(count, 'node')} x {n} {gpu} ({mem_mib // 1024} GiB, speed {speed:g}x V100)"
            f"{inside}, NIC {nic:g} Gbit/s"
        )
    members: dict[int, list[Node]] = {}
    for node in cluster.nodes:
        members.setdefault(node.rack, []).append(node)
    racks: Counter[tuple[int, float, float]] = Counter()
    for i, rack in enumerate(cluster.racks):
        nodes = members.get(i, [])
        nic = sum(n.nic_gbps for n in nodes)
        racks[(len(nodes), rack.uplink_gbps, nic / rack.uplink_gbps)] += 1
    for (n, uplink, ratio), count in sorted(racks.items(), reverse=True):
        lines.append(
            f"  {_count(count, 'rack')} x {_count(n, 'node')}, uplink {uplink:g} Gbit/s "
            f"(oversubscription {ratio:.3g}:1)"
        )
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pair_kinds(node: Node) -> str:
    """The node's kinds of GPU pair link, nearest first: `NV2/NV1/SYS`."""
    links = {link for row in node.links for link in row if link is not None}
    nearest = sorted(links, key=lambda link: (-link.nvlinks, link.pcie))
    return "/".join(dict.fromkeys(link.label() for link in nearest))


# --- node types and assembly --------------------------------------------------------------


def pcie_topology(num_gpus: int) -> tuple[Links, tuple[int, ...]]:
    """The GPU matrix and NUMA nodes of a generic PCIe server.

    GPUs go in pairs behind PCIe switches (PIX); the switches are split between two
    CPU sockets, the first half (rounded up) on socket 0. GPUs behind different
    switches of one socket reach each other through host bridges of that NUMA node
    (NODE, as nvidia-smi reports on dual-Xeon Skylake servers); across sockets, SYS.
    """
    switches = (num_gpus + 1) // 2
    on_socket0 = (switches + 1) // 2
    numa = tuple(0 if i // 2 < on_socket0 else 1 for i in range(num_gpus))

    def link(i: int, j: int) -> PairLink | None:
        if i == j:
            return None
        if i // 2 == j // 2:
            return PairLink(0, PcieLevel.PIX)
        return PairLink(0, PcieLevel.NODE if numa[i] == numa[j] else PcieLevel.SYS)

    links = tuple(tuple(link(i, j) for j in range(num_gpus)) for i in range(num_gpus))
    return links, numa


@cache
def generic_node_type(num_gpus: int, gpu: str = GENERIC_GPU) -> NodeType:
    """A generic PCIe server with `num_gpus` GPUs of the known model `gpu`."""
    links, numa = pcie_topology(num_gpus)
    return NodeType(f"pcie-{num_gpus}x{gpu}", _presets()[0][gpu], links, numa, GENERIC_NIC_GBPS)


def _uniform(name: str, node_type: NodeType, count: int, prefix: str = "node") -> Cluster:
    names = [f"{prefix}-{k}" for k in range(count)]
    racks = [
        _RackPlan(f"r{r}", 1.0, tuple((n, node_type) for n in names[start : start + RACK_SIZE]))
        for r, start in enumerate(range(0, count, RACK_SIZE))
    ]
    return _assemble(name, racks)


def _assemble(name: str, racks: Sequence[_RackPlan]) -> Cluster:
    nodes: list[Node] = []
    out_racks: list[Rack] = []
    for r, plan in enumerate(racks):
        nic_total = 0.0
        for node_name, t in plan.nodes:
            gpus = tuple(
                Gpu(i, _gpu_uuid(name, node_name, i), t.numa[i]) for i in range(len(t.numa))
            )
            nodes.append(Node(node_name, r, t.gpu_type, gpus, t.links, t.nic_gbps))
            nic_total += t.nic_gbps
        out_racks.append(Rack(plan.name, nic_total / plan.oversubscription))
    return Cluster(name, tuple(nodes), tuple(out_racks))


def _gpu_uuid(cluster: str, node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuflow:{cluster}/{node}/{index}')}"


# --- YAML ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    """A YAML value with where it came from: the file, its dotted path, its key's line."""

    source: str
    path: str
    node: yaml.Node
    line: int

    def error(self, message: str) -> ClusterSpecError:
        return ClusterSpecError(
            message, source=self.source, line=self.line, field=self.path or None
        )

    def child(self, name: str, node: yaml.Node, line: int) -> _Field:
        path = f"{self.path}.{name}" if self.path else name
        return _Field(self.source, path, node, line)

    def mapping(
        self, required: Iterable[str] = (), optional: Iterable[str] = ()
    ) -> dict[str, _Field]:
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error("expected a mapping")
        allowed = [*required, *optional]
        out: dict[str, _Field] = {}
        for key_node, value_node in self.node.value:
            key, line = str(_construct(key_node)), key_node.start_mark.line + 1
            if allowed and key not in allowed:
                raise self.child(key, value_node, line).error(
                    f"unknown field (expected one of: {', '.join(allowed)})"
                )
            if key in out:
                raise self.child(key, value_node, line).error("duplicate key")
            out[key] = self.child(key, value_node, line)
        for key in required:
            if key not in out:
                raise self.error(f"missing required field '{key}'")
        return out

    def sequence(self) -> list[_Field]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.error("expected a list")
        return [
            _Field(self.source, f"{self.path}[{i}]", item, item.start_mark.line + 1)
            for i, item in enumerate(self.node.value)
        ]

    def text(self) -> str:
        value = self._scalar()
        if not isinstance(value, str) or not value:
            raise self.error("expected a non-empty string")
        return value

    def integer(self, minimum: int) -> int:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(f"must be >= {minimum}, got {value}")
        return value

    def number(self, minimum: float, *, strict: bool = False) -> float:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected a number, got {value!r}")
        if value < minimum or (strict and value == minimum):
            raise self.error(f"must be {'>' if strict else '>='} {minimum:g}, got {value:g}")
        return float(value)

    def _scalar(self) -> Any:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.error("expected a single value")
        return _construct(self.node)


def _construct(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _compose(path: Path, source: str) -> _Field:
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else None
        raise ClusterSpecError(f"not valid YAML: {e.problem}", source=source, line=line) from None
    if node is None:
        raise ClusterSpecError("empty file", source=source)
    return _Field(source, "", node, node.start_mark.line + 1)


@dataclass(frozen=True, slots=True)
class _Catalog:
    gpu_types: dict[str, GpuType]
    node_types: dict[str, NodeType]


def _read_types(doc: dict[str, _Field], known: _Catalog) -> _Catalog:
    """The document's gpu_types and node_types, on top of (and shadowing) `known`."""
    gpu_types = dict(known.gpu_types)
    if "gpu_types" in doc:
        for name, f in doc["gpu_types"].mapping().items():
            gpu_types[name] = _gpu_fields(f, f.mapping(optional=_GPU_FIELDS), name, None)
    node_types = dict(known.node_types)
    if "node_types" in doc:
        for name, f in doc["node_types"].mapping().items():
            node_types[name] = _node_type(f, name, gpu_types)
    return _Catalog(gpu_types, node_types)


def _gpu_fields(f: _Field, m: dict[str, _Field], name: str, base: GpuType | None) -> GpuType:
    """A GPU type from the fields in `m`, the missing ones taken from `base` if known."""
    if base is None:
        for key in ("mem_mib", "pcie_gbps"):
            if key not in m:
                raise f.error(f"missing required field '{key}' (GPU model '{name}' is not known)")
        base = GpuType(name, mem_mib=0, nvlink_gbps=0.0, pcie_gbps=0.0)
    return GpuType(
        name=name,
        mem_mib=m["mem_mib"].integer(1) if "mem_mib" in m else base.mem_mib,
        nvlink_gbps=m["nvlink_gbps"].number(0) if "nvlink_gbps" in m else base.nvlink_gbps,
        pcie_gbps=m["pcie_gbps"].number(0, strict=True) if "pcie_gbps" in m else base.pcie_gbps,
        speed=m["speed"].number(0, strict=True) if "speed" in m else base.speed,
    )


def _gpu_type(f: _Field, known: dict[str, GpuType]) -> GpuType:
    if isinstance(f.node, yaml.ScalarNode):
        model = f.text()
        if model not in known:
            raise f.error(f"unknown GPU model '{model}' (known: {', '.join(sorted(known))})")
        return known[model]
    m = f.mapping(["model"], _GPU_FIELDS)
    model = m["model"].text()
    return _gpu_fields(f, m, model, known.get(model))


def _node_type(f: _Field, name: str, gpu_types: dict[str, GpuType]) -> NodeType:
    m = f.mapping(["gpu", "nic_gbps"], ["gpus", "numa", "topology"])
    gpu = _gpu_type(m["gpu"], gpu_types)
    nic_gbps = m["nic_gbps"].number(0, strict=True)
    if "topology" in m:
        try:
            links = parse_topology_matrix(m["topology"].text())
        except ValueError as e:
            raise m["topology"].error(str(e)) from None
        if not links:
            raise m["topology"].error("no GPU rows")
        numa = (0,) * len(links)
        if "gpus" in m and m["gpus"].integer(1) != len(links):
            raise m["topology"].error(
                f"{len(links)} GPUs in the matrix but gpus is {m['gpus'].integer(1)}"
            )
        if gpu.nvlink_gbps <= 0 and any(c and c.nvlinks for row in links for c in row):
            raise m["topology"].error(f"NVLink pairs, but GPU {gpu.name} has no nvlink_gbps")
    elif "gpus" in m:
        links, numa = pcie_topology(m["gpus"].integer(1))
    else:
        raise f.error("needs 'gpus' or 'topology'")
    if "numa" in m:
        items = m["numa"].sequence()
        if len(items) != len(links):
            raise m["numa"].error(f"{len(items)} entries for {len(links)} GPUs")
        numa = tuple(item.integer(0) for item in items)
    return NodeType(name, gpu, links, numa, nic_gbps)


def _racks(f: _Field, node_types: dict[str, NodeType]) -> list[_RackPlan]:
    plans: list[_RackPlan] = []
    rack_names: set[str] = set()
    next_k: Counter[str] = Counter()
    items = f.sequence()
    if not items:
        raise f.error("no racks")
    for r, item in enumerate(items):
        m = item.mapping(["nodes"], ["name", "oversubscription"])
        name = m["name"].text() if "name" in m else f"r{r}"
        if name in rack_names:
            raise (m.get("name") or item).error(f"duplicate rack name '{name}'")
        rack_names.add(name)
        ratio = m["oversubscription"].number(1) if "oversubscription" in m else 1.0
        members: list[tuple[str, NodeType]] = []
        groups = m["nodes"].sequence()
        if not groups:
            raise m["nodes"].error("no nodes")
        for group in groups:
            g = group.mapping(["type"], ["count", "name_prefix"])
            type_name = g["type"].text()
            if type_name not in node_types:
                known = ", ".join(sorted(node_types))
                raise g["type"].error(f"unknown node type '{type_name}' (known: {known})")
            prefix = g["name_prefix"].text() if "name_prefix" in g else type_name
            for _ in range(g["count"].integer(1) if "count" in g else 1):
                # Unique by construction: k has no dash, so the prefix is everything
                # before the last one.
                members.append((f"{prefix}-{next_k[prefix]}", node_types[type_name]))
                next_k[prefix] += 1
        plans.append(_RackPlan(name, ratio, tuple(members)))
    return plans


def _load_yaml(path: Path) -> Cluster:
    root = _compose(path, str(path))
    doc = root.mapping(["racks"], ["name", "gpu_types", "node_types"])
    catalog = _read_types(doc, _Catalog(*_presets()))
    name = doc["name"].text() if "name" in doc else path.stem
    return _assemble(name, _racks(doc["racks"], catalog.node_types))


@cache
def _presets() -> tuple[dict[str, GpuType], dict[str, NodeType]]:
    """GPU and node types from controller/presets/*.yaml (gpus.yaml first)."""
    folder = resources.files("controller").joinpath("presets")
    files = sorted(
        (p for p in folder.iterdir() if p.name.endswith(".yaml")),
        key=lambda p: (p.name != "gpus.yaml", p.name),
    )
    catalog = _Catalog({}, {})
    for item in files:
        with resources.as_file(item) as path:
            doc = _compose(path, f"presets/{item.name}").mapping(
                optional=["gpu_types", "node_types"]
            )
            catalog = _read_types(doc, catalog)
    return catalog.gpu_types, catalog.node_types


# --- CSV ----------------------------------------------------------------------------------


def _load_csv(path: Path) -> Cluster:
    source = str(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        rows = [
            (reader.line_num, row) for row in reader if any((v or "").strip() for v in row.values())
        ]
    if all(h in header for h in _TIRESIAS_FIELDS):
        return _tiresias(path.stem, source, rows)
    if all(h in header for h in _OPENB_FIELDS):
        return _openb(path.stem, source, rows)
    raise ClusterSpecError(
        f"unknown CSV header {','.join(header)!r}; expected a Tiresias cluster_spec.csv "
        f"({','.join(_TIRESIAS_FIELDS)},...) or an openb node list (sn,...,gpu,model)",
        source=source,
        line=1,
    )


def _csv_int(source: str, line: int, row: dict[str, str | None], key: str, minimum: int) -> int:
    raw = (row.get(key) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise ClusterSpecError(
            f"expected an integer, got {raw!r}", source=source, line=line, field=key
        ) from None
    if value < minimum:
        raise ClusterSpecError(
            f"must be >= {minimum}, got {value}", source=source, line=line, field=key
        )
    return value


def _tiresias(name: str, source: str, rows: list[tuple[int, dict[str, str | None]]]) -> Cluster:
    if len(rows) != 1:
        raise ClusterSpecError(f"expected one data row, found {len(rows)}", source=source)
    line, row = rows[0]
    switches, per_switch, gpus = (_csv_int(source, line, row, k, 1) for k in _TIRESIAS_FIELDS)
    t = generic_node_type(gpus)
    racks = [
        _RackPlan(f"r{s}", 1.0, tuple((f"node-{s * per_switch + k}", t) for k in range(per_switch)))
        for s in range(switches)
    ]
    return _assemble(name, racks)


def _openb(name: str, source: str, rows: list[tuple[int, dict[str, str | None]]]) -> Cluster:
    nodes: list[tuple[str, NodeType]] = []
    seen: set[str] = set()
    for line, row in rows:
        gpus = _csv_int(source, line, row, "gpu", 0)
        if gpus == 0:
            continue
        sn, model = (row.get("sn") or "").strip(), (row.get("model") or "").strip()
        if not sn or sn in seen:
            raise ClusterSpecError(
                f"missing or duplicate node name {sn!r}", source=source, line=line, field="sn"
            )
        if model not in OPENB_MODELS:
            known = ", ".join(OPENB_MODELS)
            raise ClusterSpecError(
                f"unknown GPU model {model!r} (known: {known})",
                source=source,
                line=line,
                field="model",
            )
        seen.add(sn)
        nodes.append((sn, generic_node_type(gpus, OPENB_MODELS[model])))
    if not nodes:
        raise ClusterSpecError("no nodes with GPUs", source=source)
    racks = [
        _RackPlan(f"r{r}", 1.0, tuple(nodes[start : start + RACK_SIZE]))
        for r, start in enumerate(range(0, len(nodes), RACK_SIZE))
    ]
    return _assemble(name, racks)
