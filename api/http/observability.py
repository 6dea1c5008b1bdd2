"""Prometheus: request counts and latencies (an ASGI middleware), job and GPU gauges.

Each app has its own CollectorRegistry, so several apps (tests) never clash;
`create_app` installs the middleware and serves `render` at /metrics.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.live import LiveCluster
from controller.model import JobStatus


class LiveCollector(Collector):
    """Gauges read from the LiveCluster at scrape time."""

    def __init__(self, live: Callable[[], LiveCluster | None]) -> None:
        self._live = live

    def collect(self) -> Iterator[GaugeMetricFamily]:
        live = self._live()
        if live is None:
            return
        states = live.jobs(active_only=True)
        jobs = GaugeMetricFamily("gpuflow_jobs", "jobs by status", labels=["status"])
        tally = Tally(s.status for s in states)
        tally.update(live.done_counts())
        for st in JobStatus:
            jobs.add_metric([st.value], tally[st])
        yield jobs
        yield GaugeMetricFamily(
            "gpuflow_cluster_gpus", "GPUs in the cluster", value=live.cluster.num_gpus
        )
        allocated = sum(
            s.allocation.gpu_weight
            for s in states
            if s.status is JobStatus.RUNNING and s.allocation is not None
        )
        yield GaugeMetricFamily(
            "gpuflow_cluster_gpus_allocated", "GPUs held by running jobs", value=allocated
        )


def _template(scope: Scope) -> str:
    """The route template ("/api/v1/jobs/{job_id}"): bounded label values."""
    if scope.get("route") is None:
        return "unmatched"
    path: str = scope["path"]
    params: dict[str, Any] = scope.get("path_params", {})
    for name, value in params.items():
        path = path.replace(f"/{value}", f"/{{{name}}}", 1)
    return path


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gpuflow_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpuflow_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (not its raw path)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = _template(scope)
            method = scope["method"]
            self.metrics.requests.labels(method, path, str(status[0])).inc()
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)
