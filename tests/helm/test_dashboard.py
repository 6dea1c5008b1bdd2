"""The Grafana dashboard the chart ships (helm/gpuflow/dashboards/gpuflow.json): every
panel's query names metrics the operator (operators.metrics) or the API
(api.http.observability) exports, with labels those metrics carry; the ConfigMap that
Grafana's sidecar loads holds it under the sidecar's label."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from api.http.observability import Metrics
from operators.metrics import OperatorMetrics
from tests.helm.chart import CHART, NAMESPACE, Manifests
from tests.operators.test_metrics import a_round

DASHBOARD = json.loads((CHART / "dashboards" / "gpuflow.json").read_text())
METRIC = re.compile(r"\b(gpuflow_[a-z0-9_]+)\b")
GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\{([^}]*)\}")
ALERTED = (  # what issue 30 asks an operator can alert on, each on some panel
    "gpuflow_operator_round_seconds_bucket",
    "gpuflow_operator_waiting_jobs",
    "gpuflow_operator_wait_seconds_bucket",
    "gpuflow_operator_preemptions_total",
    "gpuflow_operator_job_restarts_total",
    "gpuflow_operator_gpus",
    "gpuflow_operator_reclaim_seconds_bucket",
)


def exported() -> dict[str, set[str]]:
    """Every sample name the operator and the API export -> its label names, from
    registries that have seen one of each thing they count (a labelled metric with no
    child exports no sample)."""
    ops = OperatorMetrics()
    ops.observe_round(0.01, *a_round())
    ops.decision("preempt", "PreemptedByPolicy")
    ops.decision("fail", "BackoffLimitExceeded")
    ops.api_error("get", "pods", "500")
    ops.set_leader(True)
    api = Metrics()
    api.requests.labels("GET", "/api/v1/jobs", "200").inc()
    api.latency.labels("GET", "/api/v1/jobs").observe(0.01)
    out: dict[str, set[str]] = {}
    for registry in (ops.registry, api.registry):
        for family in registry.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
    return out


def panels(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    out = []
    for panel in node.get("panels", []):
        out.append(panel)
        out.extend(panels(panel))
    return out


def queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(DASHBOARD) for t in p.get("targets", [])]


@pytest.mark.parametrize(("title", "expr"), queries())
def test_every_query_names_exported_metrics_and_their_labels(title: str, expr: str) -> None:
    names = exported()
    used = set(METRIC.findall(expr))
    assert used, f"{title}: no gpuflow metric in {expr!r}"
    unknown = used - set(names)
    assert not unknown, f"{title}: not exported: {sorted(unknown)}"
    labels = set().union(*(names[n] for n in used)) | {"le", "instance"}
    for group in GROUPING.findall(expr) + SELECTOR.findall(expr):
        for item in group.split(","):
            label = re.split(r"[=!~]", item.strip())[0].strip()
            assert not label or label in labels, f"{title}: no label {label!r} on {sorted(used)}"


def test_every_panel_has_a_query_and_the_alerted_metrics_all_show() -> None:
    for panel in panels(DASHBOARD):
        if panel.get("type") != "row":
            assert panel.get("targets"), panel["title"]
    shown = {name for _, expr in queries() for name in METRIC.findall(expr)}
    assert set(ALERTED) <= shown, sorted(set(ALERTED) - shown)
    ids = [p["id"] for p in panels(DASHBOARD)]
    assert len(ids) == len(set(ids))


def test_the_chart_ships_it_in_a_configmap_for_grafanas_sidecar(render: Any) -> None:
    m: Manifests = render()
    cm = m.component("ConfigMap", "grafana-dashboard")
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "gpuflow"
    assert json.loads(cm["data"]["gpuflow.json"]) == DASHBOARD
    elsewhere = render(grafana__dashboard__namespace="monitoring", grafana__dashboard__label="dash")
    moved = elsewhere.component("ConfigMap", "grafana-dashboard")
    assert moved["metadata"]["namespace"] == "monitoring"
    assert moved["metadata"]["labels"]["dash"] == "1"
    off = render(grafana__dashboard__enabled=False)
    assert not [d for d in off.of_kind("ConfigMap") if "grafana" in d["metadata"]["name"]]
