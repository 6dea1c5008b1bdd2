"""Queue trees from YAML (replays' `--queues FILE`) or from already parsed data.

The file holds a `queues` list; a queue nests its sub-queues under `children`, or
names its parent with `parent` (the form the Kubernetes backend's flat list of
`Queue` resources takes); the two forms may be mixed:

    queues:
      - {name: team-a, guarantee: 64, weight: 1, tenants: [team-a]}
      - {name: team-b, guarantee: 38, limit: 96, weight: 2}

`guarantee` and `limit` are a number of GPUs of any model or a map GPU model ->
GPUs; an inner queue without a guarantee gets the sum of its children's. Every
fault is a `QuotaSpecError` naming the field (`queues[1].limit`), and read from a
file the line it is on. Called by the replay command (gpuflow/cli.py) and by the
Kubernetes backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from controller.model.quotas import GpuQuota, QuotaNode, QuotaSpecError, QuotaTree
from controller.spec.types import MAX_GPUS

KEYS = frozenset({"name", "guarantee", "limit", "weight", "tenants", "children", "parent"})
# Larger files are refused before parsing: a tree of a few thousand queues fits.
MAX_FILE_BYTES = 1 << 20
# A weight is a share of what is left over guarantees: a million to one is past any
# use, and a bound keeps the shares' arithmetic finite (an infinite weight gave NaN).
MAX_WEIGHT = 1e6


def load_quotas(path: str | Path) -> QuotaTree:
    """The queue tree in the YAML file at `path`."""
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise QuotaSpecError("file", f"larger than {MAX_FILE_BYTES} bytes", source=source)
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise QuotaSpecError("file", f"cannot read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise QuotaSpecError("file", f"not UTF-8 text: {exc.reason}", source=source) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise QuotaSpecError("file", f"not YAML{line}", source=source) from None
    try:
        return quotas_from_data(data)
    except QuotaSpecError as exc:
        at = _line_of(text, exc.field)
        raise QuotaSpecError(exc.field, exc.message, source=source, line=at) from None


FIELD_STEP = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _line_of(text: str, field: str) -> int | None:
    """The line of the value at `field` (`queues[1].limit`) in the YAML `text`, or of
    the deepest part of that path found (a missing key: the queue that lacks it)."""
    node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    line = None
    for index, key in FIELD_STEP.findall(field):
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.SequenceNode):
            if key == "queues":
                continue  # the bare list form: no `queues:` key
            node = node.value[int(index)] if index and int(index) < len(node.value) else None
        elif isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == key), None) if key else None
        else:
            node = None
    return node.start_mark.line + 1 if node is not None else line


def quotas_from_data(data: Any) -> QuotaTree:
    """A tree from `{"queues": [...]}` (or the bare list), as parsed from YAML/JSON."""
    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in data if k != "queues")
        if unknown:
            raise QuotaSpecError(unknown[0], "unknown key (expected 'queues')")
        data = data.get("queues")
    if not isinstance(data, list) or not data:
        raise QuotaSpecError("queues", "must be a non-empty list of quotas")
    flat: list[tuple[str, dict[str, Any], str | None]] = []
    for i, item in enumerate(data):
        _flatten(item, f"queues[{i}]", None, flat)
    roots = _link(flat)
    try:
        return QuotaTree(roots)
    except QuotaSpecError as exc:
        raise QuotaSpecError(_input_path(exc.field, roots, flat), exc.message) from None


def _input_path(
    field: str, roots: tuple[QuotaNode, ...], flat: list[tuple[str, dict[str, Any], str | None]]
) -> str:
    """`field`, a path in the built tree, as the path of the same value in the input
    (they differ where queues name their parent instead of nesting)."""
    given = {item["name"]: path for path, item, _ in flat}
    tree_paths: list[tuple[str, str]] = []

    def walk(node: QuotaNode, path: str) -> None:
        tree_paths.append((path, given[node.name]))
        for j, child in enumerate(node.children):
            walk(child, f"{path}.children[{j}]")

    for i, root in enumerate(roots):
        walk(root, f"queues[{i}]")
    for tree_path, input_path in sorted(tree_paths, key=lambda p: -len(p[0])):
        if field == tree_path or field.startswith(tree_path + "."):
            return input_path + field[len(tree_path) :]
    return field


def _flatten(
    item: Any, path: str, parent: str | None, out: list[tuple[str, dict[str, Any], str | None]]
) -> None:
    """Append (path, fields, parent name) for `item` and its nested children."""
    if not isinstance(item, Mapping):
        raise QuotaSpecError(path, "must be a mapping with at least a name")
    unknown = sorted(str(k) for k in item if k not in KEYS)
    if unknown:
        raise QuotaSpecError(f"{path}.{unknown[0]}", f"unknown key (expected {_keys()})")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise QuotaSpecError(f"{path}.name", "must be a non-empty string")
    named = item.get("parent")
    if named is not None:
        if parent is not None:
            raise QuotaSpecError(f"{path}.parent", "a nested quota's parent is where it is")
        if not isinstance(named, str) or not named:
            raise QuotaSpecError(f"{path}.parent", "must be a quota's name")
        parent = named
    out.append((path, dict(item), parent))
    children = item.get("children", [])
    if not isinstance(children, list):
        raise QuotaSpecError(f"{path}.children", "must be a list of quotas")
    for j, child in enumerate(children):
        _flatten(child, f"{path}.children[{j}]", name, out)


def _link(flat: list[tuple[str, dict[str, Any], str | None]]) -> tuple[QuotaNode, ...]:
    """Build nodes bottom-up from the flat list; roots in the order given."""
    paths: dict[str, str] = {}
    kids: dict[str | None, list[str]] = {}
    fields: dict[str, dict[str, Any]] = {}
    for path, item, parent in flat:
        name = item["name"]
        if name in paths:
            raise QuotaSpecError(f"{path}.name", f"quota {name!r} is defined twice")
        paths[name], fields[name] = path, item
        kids.setdefault(parent, []).append(name)
    for path, _, parent in flat:
        if parent is not None and parent not in paths:
            raise QuotaSpecError(f"{path}.parent", f"no quota named {parent!r}")

    built: dict[str, QuotaNode] = {}

    def build(name: str, visiting: frozenset[str]) -> QuotaNode:
        if name in visiting:
            raise QuotaSpecError(f"{paths[name]}.parent", f"quota {name!r} is its own ancestor")
        if name not in built:
            children = tuple(build(c, visiting | {name}) for c in kids.get(name, []))
            built[name] = _node(paths[name], fields[name], children)
        return built[name]

    roots = tuple(build(name, frozenset()) for name in kids.get(None, []))
    if len(built) < len(paths):  # a cycle of parents with no root above it
        name = next(n for n in paths if n not in built)
        raise QuotaSpecError(f"{paths[name]}.parent", f"quota {name!r} is its own ancestor")
    return roots


def _node(path: str, item: dict[str, Any], children: tuple[QuotaNode, ...]) -> QuotaNode:
    guarantee_value = item.get("guarantee")
    if guarantee_value is None and children:
        guarantee = _sum_guarantees(children)
    else:
        guarantee = _quota(f"{path}.guarantee", 0 if guarantee_value is None else guarantee_value)
    limit_value = item.get("limit")
    limit = None if limit_value is None else _quota(f"{path}.limit", limit_value)
    weight = item.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise QuotaSpecError(f"{path}.weight", f"must be a number, got {weight!r}")
    if not math.isfinite(weight) or weight > MAX_WEIGHT:
        raise QuotaSpecError(f"{path}.weight", f"must be finite and <= {MAX_WEIGHT:g}")
    tenants = item.get("tenants", [])
    if not isinstance(tenants, list) or not all(isinstance(t, str) and t for t in tenants):
        raise QuotaSpecError(f"{path}.tenants", "must be a list of tenant names")
    try:
        return QuotaNode(
            name=item["name"],
            guarantee=guarantee,
            limit=limit,
            weight=float(weight),
            tenants=tuple(tenants),
            children=children,
        )
    except QuotaSpecError as exc:  # pragma: no cover - QuotaNode itself checks nothing
        raise QuotaSpecError(f"{path}.{exc.field}", exc.message) from None


def _quota(path: str, value: Any) -> GpuQuota:
    if isinstance(value, bool):
        raise QuotaSpecError(path, f"must be a number of GPUs, got {value!r}")
    if isinstance(value, int):
        if not 0 <= value <= MAX_GPUS:
            raise QuotaSpecError(path, f"must be >= 0 and <= {MAX_GPUS} GPUs, got {_shown(value)}")
        return GpuQuota.of(value)
    if isinstance(value, Mapping) and value:
        per_model: dict[str, int] = {}
        for model, gpus in value.items():
            if not isinstance(model, str) or not model:
                raise QuotaSpecError(path, f"GPU model {model!r} must be a name")
            if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_GPUS:
                raise QuotaSpecError(
                    f"{path}.{model}",
                    f"must be a whole number >= 0 and <= {MAX_GPUS}, got {_shown(gpus)}",
                )
            per_model[model] = gpus
        return GpuQuota.of(per_model)
    raise QuotaSpecError(
        path, f"must be a whole number of GPUs or a map model -> GPUs, got {value!r}"
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:30] + "..."


def _sum_guarantees(children: tuple[QuotaNode, ...]) -> GpuQuota:
    total: dict[str, int] = {}
    for child in children:
        for model, gpus in child.guarantee.by_model:
            total[model] = total.get(model, 0) + gpus
    return GpuQuota(tuple(sorted(total.items())))


def _keys() -> str:
    return ", ".join(sorted(KEYS))
