"""CSV cluster specs: the Tiresias simulator's cluster_spec.csv and Alibaba openb node lists."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from controller.model.cluster import (
    Cluster,
)
from controller.spec.types import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    OPENB_FIELDS,
    OPENB_MODELS,
    RACK_SIZE,
    TIRESIAS_FIELDS,
    ClusterSpecError,
    NodeType,
    RackPlan,
    assemble,
)
from controller.spec.yaml_spec import generic_node_type

# --- CSV ----------------------------------------------------------------------------------


def load_csv(path: Path) -> Cluster:
    source = str(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        rows = [
            (reader.line_num, row) for row in reader if any((v or "").strip() for v in row.values())
        ]
    if all(h in header for h in TIRESIAS_FIELDS):
        return _tiresias(path.stem, source, rows)
    if all(h in header for h in OPENB_FIELDS):
        return _openb(path.stem, source, rows)
    raise ClusterSpecError(
        f"unknown CSV header {','.join(header)!r}; expected a Tiresias cluster_spec.csv "
        f"({','.join(TIRESIAS_FIELDS)},...) or an openb node list (sn,...,gpu,model)",
        source=source,
        line=1,
    )


def _csv_int(
    source: str,
    line: int,
    row: dict[str, str | None],
    key: str,
    minimum: int,
    maximum: int | None = None,
) -> int:
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
    if maximum is not None and value > maximum:
        raise ClusterSpecError(
            f"must be <= {maximum}, got {value}", source=source, line=line, field=key
        )
    return value


def _tiresias(name: str, source: str, rows: list[tuple[int, dict[str, str | None]]]) -> Cluster:
    if len(rows) != 1:
        raise ClusterSpecError(f"expected one data row, found {len(rows)}", source=source)
    line, row = rows[0]
    switch_field, node_field, gpu_field = TIRESIAS_FIELDS
    switches = _csv_int(source, line, row, switch_field, 1, MAX_NODES)
    per_switch = _csv_int(source, line, row, node_field, 1, MAX_NODES)
    gpus = _csv_int(source, line, row, gpu_field, 1, MAX_GPUS_PER_NODE)
    if switches * per_switch > MAX_NODES:
        raise ClusterSpecError(
            f"{switches} x {per_switch} nodes: more than {MAX_NODES}", source=source, line=line
        )
    t = generic_node_type(gpus)
    racks = [
        RackPlan(f"r{s}", 1.0, tuple((f"node-{s * per_switch + k}", t) for k in range(per_switch)))
        for s in range(switches)
    ]
    return assemble(name, racks, source=source)


def _openb(name: str, source: str, rows: list[tuple[int, dict[str, str | None]]]) -> Cluster:
    nodes: list[tuple[str, NodeType]] = []
    seen: set[str] = set()
    for line, row in rows:
        gpus = _csv_int(source, line, row, "gpu", 0, MAX_GPUS_PER_NODE)
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
        # Each node's CPU and memory, when the list has them: pods ask for both.
        cpu, mem = (
            _csv_int(source, line, row, column, 0) if (row.get(column) or "").strip() else None
            for column in ("cpu_milli", "memory_mib")
        )
        node_type = replace(
            generic_node_type(gpus, OPENB_MODELS[model]), cpu_milli=cpu, host_mem_mib=mem
        )
        nodes.append((sn, node_type))
        if len(nodes) > MAX_NODES:
            raise ClusterSpecError(f"more than {MAX_NODES} nodes", source=source, line=line)
    if not nodes:
        raise ClusterSpecError("no nodes with GPUs", source=source)
    racks = [
        RackPlan(f"r{r}", 1.0, tuple(nodes[start : start + RACK_SIZE]))
        for r, start in enumerate(range(0, len(nodes), RACK_SIZE))
    ]
    return assemble(name, racks, source=source)
