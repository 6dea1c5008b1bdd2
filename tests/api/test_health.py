"""Health, readiness, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.builders import auth, submit


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"


def test_prometheus_metrics_count_requests_and_jobs(client: TestClient) -> None:
    alice = auth(client, "alice", "vision")
    submit(client, alice)
    root = auth(client, "root", "ops", "admin")
    text = client.get("/metrics", headers=root).text
    assert (
        'gpuflow_http_requests_total{method="POST",route="/api/v1/jobs",status="201"} 1.0' in text
    )
    assert "gpuflow_cluster_gpus 8.0" in text
    assert 'gpuflow_jobs{status="' in text


def test_openapi_has_every_resource_and_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = set(spec["paths"])
    for path in (
        "/api/v1/jobs",
        "/api/v1/nodes",
        "/api/v1/cluster",
        "/api/v1/policies/active",
        "/api/v1/traces",
        "/api/v1/replays",
        "/api/v1/users",
        "/api/v1/tokens",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in paths
    assert spec["components"]["schemas"]["JobCreate"]["examples"]
