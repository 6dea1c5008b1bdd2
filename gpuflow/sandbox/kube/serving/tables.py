"""`meta.k8s.io/v1 Table` responses, which `kubectl get` asks for.

Called by `handler.py` when the Accept header carries `as=Table`. Custom resources
get Name plus their CRD's additionalPrinterColumns (values found by a simple JSONPath:
`.a.b`, `[n]`, `[*]`, `[?(@.k=="v")]`; `date` columns shown as ages, as the real
apiextensions table convertor does); built-ins get the columns kubectl users know from
a real cluster, reduced to what this server can know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuflow.sandbox.kube.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, Callable[[Obj], Any]]  # name, type, cell function

_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
}


def human_age(timestamp: str | None, now: datetime | None = None) -> str:
    """duration.HumanDuration of the time since an RFC 3339 timestamp."""
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 else f"{days // 365}y"


_TOKEN_RE = re.compile(
    r"\.([A-Za-z0-9_\-/]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.\-/]+)\s*==\s*"
    r"[\"']([^\"']*)[\"']\)\]"
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Results of a simple JSONPath (the subset printer columns use) on an object."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    nodes = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN_RE.match(path, pos)
        if m is None:
            return []
        pos = m.end()
        nodes = _step(nodes, m)
    return nodes


def _step(nodes: list[Any], m: re.Match[str]) -> list[Any]:
    field, index, filter_key, filter_value = m.groups()
    out: list[Any] = []
    for node in nodes:
        if field is not None:
            if isinstance(node, dict) and field in node:
                out.append(node[field])
        elif index is not None and isinstance(node, list):
            out.extend(node if index == "*" else node[int(index) : int(index) + 1])
        elif filter_key is not None and isinstance(node, list):
            for item in node:
                found = jsonpath(item, "." + filter_key)
                if found and str(found[0]) == filter_value:
                    out.append(item)
    return out


def _crd_cell(column: Obj, obj: Obj) -> Any:
    found = jsonpath(obj, column["jsonPath"])
    if not found:
        return None
    value = found[0]
    kind = column.get("type", "string")
    if kind == "date" and isinstance(value, str):
        return human_age(value)
    if kind == "string" and not isinstance(value, str):
        return json.dumps(value) if isinstance(value, dict | list) else str(value)
    return value


def _age(obj: Obj) -> str:
    return human_age(obj["metadata"].get("creationTimestamp"))


def _pod_ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(pod: Obj) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if ready is None:
        text = "Unknown"
    return text + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")


def _ports(svc: Obj) -> str:
    ports = (svc.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        ("Ready", "string", _pod_ready),
        ("Status", "string", _pod_status),
        (
            "Restarts",
            "string",
            lambda p: str(
                sum(
                    s.get("restartCount", 0)
                    for s in (p.get("status") or {}).get("containerStatuses") or []
                )
            ),
        ),
        ("Age", "string", _age),
    ],
    ("", "nodes"): [
        ("Status", "string", _node_status),
        ("Roles", "string", lambda n: "<none>"),
        ("Age", "string", _age),
        (
            "Version",
            "string",
            lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
        ),
    ],
    ("", "namespaces"): [
        ("Status", "string", lambda n: (n.get("status") or {}).get("phase", "")),
        ("Age", "string", _age),
    ],
    ("", "services"): [
        ("Type", "string", lambda s: s["spec"].get("type", "")),
        ("Cluster-IP", "string", lambda s: s["spec"].get("clusterIP", "")),
        ("Ports", "string", _ports),
        ("Age", "string", _age),
    ],
    ("", "configmaps"): [
        ("Data", "integer", lambda c: len(c.get("data") or {}) + len(c.get("binaryData") or {})),
        ("Age", "string", _age),
    ],
    ("", "events"): [
        ("Type", "string", lambda e: e.get("type", "")),
        ("Reason", "string", lambda e: e.get("reason", "")),
        (
            "Object",
            "string",
            lambda e: (
                f"{e['involvedObject'].get('kind', '').lower()}/"
                f"{e['involvedObject'].get('name', '')}"
            ),
        ),
        ("Message", "string", lambda e: e.get("message", "")),
    ],
    ("coordination.k8s.io", "leases"): [
        ("Holder", "string", lambda le: (le.get("spec") or {}).get("holderIdentity", "")),
        ("Age", "string", _age),
    ],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        ("Created At", "date", lambda c: c["metadata"].get("creationTimestamp")),
    ],
}


def _crd_column(spec: Obj) -> Column:
    return (spec["name"], spec.get("type", "string"), lambda obj: _crd_cell(spec, obj))


def _columns(rt: ResourceType) -> list[Column]:
    if rt.custom:
        specs = rt.printer_columns or (
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        )
        return [_crd_column(c) for c in specs]
    return BUILTIN_COLUMNS.get(rt.key, [("Age", "string", _age)])


def _definitions(rt: ResourceType) -> list[Obj]:
    defs = [dict(_NAME_COLUMN)]
    extra = {c["name"]: c for c in rt.printer_columns}
    for name, kind, _ in _columns(rt):
        spec = extra.get(name, {})
        defs.append(
            {
                "name": name,
                "type": kind,
                "format": spec.get("format", ""),
                "description": spec.get("description", ""),
                "priority": spec.get("priority", 0),
            }
        )
    return defs


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def to_table(rt: ResourceType, items: list[Obj], list_meta: Obj, include: str) -> Obj:
    columns = _columns(rt)
    rows = []
    for obj in items:
        row: Obj = {"cells": [obj["metadata"]["name"]] + [fn(obj) for _, _, fn in columns]}
        row_object = _row_object(obj, include)
        if row_object is not None:
            row["object"] = row_object
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": _definitions(rt),
        "rows": rows,
    }
