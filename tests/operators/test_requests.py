"""Quantities, pod requests as the scheduler counts them, and nodes' allocatable."""

from __future__ import annotations

from typing import Any

import pytest

from operators.dljobs.requests import (
    Requests,
    container_requests,
    format_cpu,
    node_allocatable,
    quantity,
    shortfall,
    spec_requests,
)


def _c(cpu: str | None = None, mem: str | None = None, **extra: Any) -> dict[str, Any]:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
    return {"name": "c", "image": "x", "resources": {"requests": req}, **extra}


@pytest.mark.parametrize(
    ("cpu", "mem", "want"),
    [
        ("500m", "128Mi", Requests(500, 128)),
        ("2", "1Gi", Requests(2000, 1024)),
        ("0.1", "1G", Requests(100, 954)),  # 10^9 bytes: 953.7 MiB, rounded up
        ("1e-1", "64Ki", Requests(100, 1)),
        ("1u", "100M", Requests(1, 96)),  # a microcore still requests a millicore
        ("16", "64Gi", Requests(16000, 65536)),
    ],
)
def test_requests_parse_and_round_up(cpu: str, mem: str, want: Requests) -> None:
    assert container_requests(_c(cpu, mem)) == want


@pytest.mark.parametrize("bad", ["abc", "1.2.3", "5 Gi", "-1", "", "1e3m", "2Gb"])
def test_bad_quantities_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        quantity(bad)


def test_a_limit_without_a_request_is_the_request() -> None:
    c = {"resources": {"limits": {"cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "1"}}}
    assert container_requests(c) == Requests(1000, 8192)


def test_pod_requests_sum_app_containers_and_take_the_init_peak() -> None:
    spec = {
        "containers": [_c("2", "1Gi"), _c("1", "3Gi")],
        "initContainers": [_c("4", "512Mi"), _c("500m", "6Gi")],
    }
    # app sum 3 CPU / 4 GiB; init peaks 4 CPU and 6 GiB, each on its own
    assert spec_requests(spec) == Requests(4000, 6144)


def test_sidecars_add_to_the_app_and_to_later_init_containers() -> None:
    spec = {
        "containers": [_c("1", "1Gi")],
        "initContainers": [_c("1", "1Gi", restartPolicy="Always"), _c("3", "1Gi")],
    }
    # init peak: 3 + the sidecar's 1 = 4 CPU; app: 1 + 1 = 2 CPU, 2 GiB
    assert spec_requests(spec) == Requests(4000, 2048)


def test_node_allocatable_rounds_down_and_may_be_absent() -> None:
    node = {"status": {"allocatable": {"cpu": "7800m", "memory": "1048575Ki", "pods": "110"}}}
    assert node_allocatable(node) == Requests(7800, 1023)
    assert node_allocatable({"status": {"allocatable": {"pods": "110"}}}) is None
    assert node_allocatable({"metadata": {}}) is None
    cpu_only = node_allocatable({"status": {"allocatable": {"cpu": "2"}}})
    assert cpu_only is not None and cpu_only.cpu_milli == 2000 and cpu_only.mem_mib > 2**40


def test_shortfall_names_the_resource() -> None:
    assert shortfall("node-1", Requests(8000, 10), Requests(6000, 100)) == (
        "node-1: needs 8 CPU, 6 allocatable free"
    )
    assert shortfall("n", Requests(500, 2048), Requests(1500, 1024)) == (
        "n: needs 2048 MiB memory, 1024 MiB allocatable free"
    )
    assert shortfall("n", Requests(1500, 1024), Requests(1500, 1024)) == ""
    assert format_cpu(250) == "0.25" and format_cpu(1500) == "1.5" and format_cpu(0) == "0"
