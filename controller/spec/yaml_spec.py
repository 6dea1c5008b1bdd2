"""YAML cluster specs and the presets (controller/presets/*.yaml); schema in controller.spec.

GPU models come from the GPU catalogue (controller.model.gpus), by gpuflow's name or
the product name NVML reports; presets/gpus.yaml adds models no datasheet describes
(the openb trace's undisclosed ones), and a spec's own `gpu_types` shadow both.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from controller.model.cluster import (
    Cluster,
    GpuType,
    parse_topology_matrix,
)
from controller.model.gpus import GPU_CATALOG
from controller.model.sharing import DEFAULT_SHARING, SharingMode
from controller.spec.types import (
    GENERIC_GPU,
    GENERIC_NIC_GBPS,
    GPU_FIELDS,
    MAX_GPUS_PER_NODE,
    MAX_LANES,
    MAX_NODES,
    SHARING_MODES,
    ClusterSpecError,
    NodeType,
    RackPlan,
    assemble,
    pcie_topology,
)


@cache
def generic_node_type(num_gpus: int, gpu: str = GENERIC_GPU) -> NodeType:
    """A generic PCIe server with `num_gpus` GPUs of the known model `gpu`."""
    links, numa = pcie_topology(num_gpus)
    return NodeType(f"pcie-{num_gpus}x{gpu}", presets()[0][gpu], links, numa, GENERIC_NIC_GBPS)


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

    def integer(self, minimum: int, maximum: int | None = None) -> int:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(f"must be <= {maximum}, got {value}")
        return value

    def sharing(self) -> SharingMode:
        value = self.text()
        if value not in SHARING_MODES:
            raise self.error(f"unknown sharing mode {value!r} (known: {', '.join(SHARING_MODES)})")
        return SharingMode(value)

    def number(self, minimum: float, *, strict: bool = False) -> float:
        value = self._scalar()
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected a number, got {value!r}")
        if not math.isfinite(value):
            raise self.error(f"expected a finite number, got {value!r}")
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
    except yaml.YAMLError as e:  # a ReaderError: a control character (a binary file)
        reason = getattr(e, "reason", None) or "unreadable"
        raise ClusterSpecError(f"not valid YAML: {reason}", source=source) from None
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
            gpu_types[name] = _gpu_fields(f, f.mapping(optional=GPU_FIELDS), name, None)
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


def known_gpu(model: str, known: dict[str, GpuType] | None = None) -> GpuType | None:
    """The GPU type `model` names among `known` (default: the presets' GPU types) or
    in the GPU catalogue under any spelling of an NVML product name; None if neither."""
    found = (presets()[0] if known is None else known).get(model)
    if found is None and (spec := GPU_CATALOG.find(model)) is not None:
        found = spec.gpu_type()
    return found


def _gpu_type(f: _Field, known: dict[str, GpuType]) -> GpuType:
    if isinstance(f.node, yaml.ScalarNode):
        model = f.text()
        found = known_gpu(model, known)
        if found is None:
            products = {p for e in GPU_CATALOG.entries for p in e.products}
            names = ", ".join(sorted(k for k in known if k not in products))
            raise f.error(
                f"unknown GPU model '{model}' (known: {names}; "
                "or the product name NVML reports, e.g. 'NVIDIA H100 80GB HBM3')"
            )
        return found
    m = f.mapping(["model"], GPU_FIELDS)
    model = m["model"].text()
    base = known_gpu(model, known)
    return _gpu_fields(f, m, base.name if base else model, base)


def _node_type(f: _Field, name: str, gpu_types: dict[str, GpuType]) -> NodeType:
    m = f.mapping(["gpu", "nic_gbps"], ["gpus", "numa", "topology", "sharing"])
    gpu = _gpu_type(m["gpu"], gpu_types)
    nic_gbps = m["nic_gbps"].number(0, strict=True)
    if "topology" in m:
        try:
            links = parse_topology_matrix(m["topology"].text())
        except ValueError as e:
            raise m["topology"].error(str(e)) from None
        if not links:
            raise m["topology"].error("no GPU rows")
        if len(links) > MAX_GPUS_PER_NODE:
            raise m["topology"].error(f"{len(links)} GPUs: more than {MAX_GPUS_PER_NODE}")
        numa = (0,) * len(links)
        if "gpus" in m and m["gpus"].integer(1, MAX_GPUS_PER_NODE) != len(links):
            raise m["topology"].error(
                f"{len(links)} GPUs in the matrix but gpus is {m['gpus'].integer(1)}"
            )
        if gpu.nvlink_gbps <= 0 and any(c and c.nvlinks for row in links for c in row):
            raise m["topology"].error(f"NVLink pairs, but GPU {gpu.name} has no nvlink_gbps")
    elif "gpus" in m:
        links, numa = pcie_topology(m["gpus"].integer(1, MAX_GPUS_PER_NODE))
    else:
        raise f.error("needs 'gpus' or 'topology'")
    if "numa" in m:
        items = m["numa"].sequence()
        if len(items) != len(links):
            raise m["numa"].error(f"{len(items)} entries for {len(links)} GPUs")
        numa = tuple(item.integer(0) for item in items)
    sharing = m["sharing"].sharing() if "sharing" in m else None
    return NodeType(name, gpu, links, numa, nic_gbps, sharing=sharing)


def _racks(f: _Field, node_types: dict[str, NodeType]) -> list[RackPlan]:
    plans: list[RackPlan] = []
    rack_names: set[str] = set()
    next_k: Counter[str] = Counter()
    total = 0  # nodes so far
    items = f.sequence()
    if not items:
        raise f.error("no racks")
    for r, item in enumerate(items):
        m = item.mapping(["nodes"], ["name", "oversubscription", "uplinks"])
        name = m["name"].text() if "name" in m else f"r{r}"
        if name in rack_names:
            raise (m.get("name") or item).error(f"duplicate rack name '{name}'")
        rack_names.add(name)
        ratio = m["oversubscription"].number(1) if "oversubscription" in m else 1.0
        uplinks = m["uplinks"].integer(1, MAX_LANES) if "uplinks" in m else 1
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
            count = g["count"].integer(1, MAX_NODES) if "count" in g else 1
            total += count
            if total > MAX_NODES:
                raise (g.get("count") or group).error(f"more than {MAX_NODES} nodes in all")
            for _ in range(count):
                # Unique by construction: k has no dash, so the prefix is everything
                # before the last one.
                members.append((f"{prefix}-{next_k[prefix]}", node_types[type_name]))
                next_k[prefix] += 1
        plans.append(RackPlan(name, ratio, tuple(members), uplinks))
    return plans


def load_yaml(path: Path) -> Cluster:
    root = _compose(path, str(path))
    doc = root.mapping(["racks"], ["name", "gpu_types", "node_types", "sharing"])
    catalog = _read_types(doc, _Catalog(*presets()))
    name = doc["name"].text() if "name" in doc else path.stem
    sharing = doc["sharing"].sharing() if "sharing" in doc else DEFAULT_SHARING
    racks = _racks(doc["racks"], catalog.node_types)
    return assemble(name, racks, source=str(path), sharing=sharing)


@cache
def presets() -> tuple[dict[str, GpuType], dict[str, NodeType]]:
    """GPU and node types: the GPU catalogue's models under each of their names, then
    controller/presets/*.yaml (gpus.yaml first)."""
    folder = resources.files("controller").joinpath("presets")
    files = sorted(
        (p for p in folder.iterdir() if p.name.endswith(".yaml")),
        key=lambda p: (p.name != "gpus.yaml", p.name),
    )
    catalog = _Catalog({name: e.gpu_type() for name, e in GPU_CATALOG.names().items()}, {})
    for item in files:
        with resources.as_file(item) as path:
            doc = _compose(path, f"presets/{item.name}").mapping(
                optional=["gpu_types", "node_types"]
            )
            catalog = _read_types(doc, catalog)
    return catalog.gpu_types, catalog.node_types
