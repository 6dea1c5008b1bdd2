"""Bad input the issue-28 probe found accepted or mis-answered (issue 28, item 7): a
replay's `interval_s` strict and in range, a queue's weight finite and its quota
within the cluster (its size, its GPU models), and a 405 whose `Allow` lists every
method of the path, on paths a parameter route used to swallow too."""

from __future__ import annotations

import re

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from starlette.routing import compile_path

from tests.api.builders import auth

API = "/api/v1"
QUEUES = f"{API}/quotas"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("false", "valid number"),
        ("true", "valid number"),
        ('"60"', "valid number"),
        ("5e-324", "must be 0 or at least 0.001 s"),
        ("0.0009", "must be 0 or at least 0.001 s"),
        ("1e7", "less than or equal to 1000000"),
        ("-1", "greater than or equal to 0"),
        ("Infinity", "finite number"),
        ("NaN", "finite number"),
    ],
)
def test_interval_s_is_a_strict_number_in_its_range(
    sqlite_client: TestClient, raw: str, words: str
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    for path, fields in (
        (f"{API}/replays", '"trace_id": 1, "policy": "fifo", "cluster": "2x4"'),
        (f"{API}/replays/sweeps", '"trace_ids": [1], "policies": ["fifo"], "clusters": ["2x4"]'),
    ):
        body = f'{{{fields}, "interval_s": {raw}}}'
        headers = {**alice, "Content-Type": "application/json"}
        r = sqlite_client.post(path, content=body, headers=headers)
        assert r.status_code == 422, r.text
        (err,) = r.json()["detail"]
        assert err["loc"] == ["body", "interval_s"] and words in err["msg"], err


def test_interval_s_takes_zero_and_its_bounds(sqlite_client: TestClient) -> None:
    from api.schemas.replays import ReplayOptions

    for value in (0, 0.001, 60, 1e6):
        assert ReplayOptions.model_validate_json(f'{{"interval_s": {value}}}').interval_s == value


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        ('{"weight": Infinity}', ["body", "weight"], "finite number"),
        ('{"weight": NaN}', ["body", "weight"], "finite number"),
        ('{"weight": 1e7}', ["body", "weight"], "less than or equal to 1000000"),
        ('{"weight": true}', ["body", "weight"], "valid number"),
        ('{"guarantee": 100000000000000000000000}', ["body", "guarantee"], "100000"),
        ('{"guarantee": 9}', ["body", "guarantee"], "more than the cluster's 8 GPUs"),
        ('{"guarantee": {"A100": 1}}', ["body", "guarantee", "A100"], "no 'A100' GPUs"),
        ('{"limit": {"A100": 1}}', ["body", "limit", "A100"], "V100-PCIE-16GB"),
        (
            '{"guarantee": {"V100-PCIE-16GB": 9}}',
            ["body", "guarantee", "V100-PCIE-16GB"],
            "more than the cluster's 8 V100-PCIE-16GB GPUs",
        ),
    ],
)
def test_a_queue_is_finite_and_within_the_cluster(
    sqlite_client: TestClient, body: str, loc: list[str], words: str
) -> None:
    admin = auth(sqlite_client, "root", "ops", "admin")
    headers = {**admin, "Content-Type": "application/json"}
    r = sqlite_client.put(f"{QUEUES}/team-x", content=body, headers=headers)
    assert r.status_code == 422, r.text
    (err, *_) = r.json()["detail"]
    assert err["loc"][: len(loc)] == loc, err
    assert words in err["msg"], err
    listed = sqlite_client.get(QUEUES, headers=admin)
    assert listed.status_code == 200 and listed.json()["count"] == 0  # nothing stored


def test_a_queue_within_the_cluster_is_stored(sqlite_client: TestClient) -> None:
    admin = auth(sqlite_client, "root", "ops", "admin")
    body = {"guarantee": {"V100-PCIE-16GB": 8}, "limit": {"V100-PCIE-16GB": 8}, "weight": 1e6}
    r = sqlite_client.put(f"{QUEUES}/team-x", json=body, headers=admin)
    assert r.status_code == 201, r.text
    assert sqlite_client.get(QUEUES, headers=admin).json()["data"][0]["weight"] == 1e6


def _paths(client: TestClient) -> dict[str, set[str]]:
    """Each route path with the methods its routes take."""
    paths: dict[str, set[str]] = {}
    for context in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        if isinstance(context.original_route, APIRoute) and context.methods:
            paths.setdefault(str(context.path), set()).update(context.methods)
    return paths


def _concrete(path: str) -> str:
    """A request path for a route path: 1 for an int, a name no route takes for others."""
    path = re.sub(r"\{[a-z_]+:int\}", "1", path)
    return re.sub(r"\{[a-z_]+(:path)?\}", "zz-none", path)


def test_every_405_lists_every_method_of_its_path(sqlite_client: TestClient) -> None:
    admin = auth(sqlite_client, "root", "ops", "admin")
    paths = _paths(sqlite_client)
    checked = 0
    for path in paths:
        concrete = _concrete(path)
        # Every route path the request path fits (/quotas/series fits /quotas/{name}).
        methods = set().union(
            *(m for p, m in paths.items() if compile_path(p)[0].fullmatch(concrete))
        )
        allow = ", ".join(sorted(methods))
        for method in METHODS:
            if method in methods:
                continue
            r = sqlite_client.request(method, concrete, headers=admin)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            assert r.headers["Allow"] == allow, (method, path)
            checked += 1
    assert checked > 100  # every path, every other method


@pytest.mark.parametrize(
    ("path", "allow"), [(f"{API}/replays/sweeps", "POST"), (f"{API}/traces/validate", "POST")]
)
def test_a_get_of_a_post_only_path_is_405_not_a_parameter_422(
    sqlite_client: TestClient, path: str, allow: str
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    r = sqlite_client.get(path, headers=alice)
    assert r.status_code == 405 and r.headers["Allow"] == allow, r.text
