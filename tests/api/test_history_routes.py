"""GET /api/v1/history/...: samples written by hand read back on the window's bins,
tenancy, bad windows refused naming the field, the OpenAPI document; and the service's
own sampler recording a local-mode cluster as jobs run (real SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from api.samples.rows import GpuReading, Waiting, build_sample
from api.samples.sampler import Sampler, write
from api.settings import Settings
from api.store.models import ClusterSample
from tests.api.builders import auth, migrated_sqlite, submit, wait_for
from tests.api.test_samples import make_node


@pytest.fixture()
def quiet(tmp_path: Path) -> Iterator[TestClient]:
    """Local mode on SQLite with its sampler off: the tests write the samples."""
    settings = migrated_sqlite(tmp_path, history=False, time_scale=1.0)
    with TestClient(create_app(settings)) as c:
        yield c


def _write(client: TestClient, t_s: float, util: float, temp: int, waits: list[float]) -> None:
    nodes = [make_node("a", {0: [("j1", 1.0)], 1: [("j2", 0.5)]}, util), make_node("b", {}, 0.0)]
    readings = {"a": {0: GpuReading(mem_used_mib=2000, mem_total_mib=16000, temperature_c=temp)}}
    tenants = {"j1": "red", "j2": "blue"}
    sample = build_sample(t_s, 30.0, nodes, readings, tenants, [Waiting("red", w) for w in waits])
    with client.app.state.sessions() as session:  # type: ignore[attr-defined]
        write(session, sample)
        session.commit()


def _get(client: TestClient, path: str, headers: dict[str, str], **query: Any) -> Any:
    r = client.get(f"/api/v1/history/{path}", params=query, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def test_samples_are_read_back_as_means_over_each_bin(quiet: TestClient) -> None:
    admin = auth(quiet, "root", "ops", "admin")
    for k in range(4):  # 0, 30, 60, 90 s: two bins of 60 s
        _write(quiet, 30.0 * k, 0.2 if k % 2 else 0.6, 60 + 10 * k, [10.0 * k, 5.0])
    body = _get(quiet, "cluster", admin, from_s=0, to_s=120, step_s=60)
    assert (body["clock"], body["t_s"], body["step_s"]) == ("simulated", [0.0, 60.0], 60.0)
    assert body["gpus_allocated"] == [1.5, 1.5] and body["waiting"] == [2.0, 2.0]
    assert body["util"] == [pytest.approx(0.8 / 8), pytest.approx(0.8 / 8)]  # 2 of 8 GPUs
    assert body["wait_max_s"] == [10.0, 30.0]  # the largest, not the mean
    assert body["wait_mean_s"] == [5.0, 15.0]
    gpus = _get(quiet, "nodes/a/gpus", admin, from_s=0, to_s=120, step_s=60)
    assert gpus["mem_total_mib"] == 16000 and len(gpus["gpus"]) == 4
    first = gpus["gpus"][0]
    assert first["temperature_c"] == [65.0, 85.0] and first["mem_used_mib"] == [2000.0, 2000.0]
    assert first["util"] == [0.4, 0.4] and gpus["gpus"][1]["allocated"] == [0.5, 0.5]
    assert gpus["gpus"][3]["temperature_c"] == [None, None]  # no reading: not known
    # Before the first sample: null, not zero.
    nodes = _get(quiet, "nodes", admin, from_s=-120, to_s=120, step_s=60, node="b")
    assert [n["node"] for n in nodes["data"]] == ["b"]
    assert nodes["data"][0]["gpus_allocated"] == [None, None, 0.0, 0.0]


def test_a_user_sees_its_own_tenants_history_only(quiet: TestClient) -> None:
    admin = auth(quiet, "root", "ops", "admin")
    alice = auth(quiet, "alice", "red")
    _write(quiet, 0.0, 0.5, 50, [40.0])
    everyone = _get(quiet, "tenants", admin, from_s=0, to_s=30)
    assert [t["tenant"] for t in everyone["data"]] == ["blue", "red"]
    mine = _get(quiet, "tenants", alice, from_s=0, to_s=30)
    assert [(t["tenant"], t["gpus"], t["wait_max_s"]) for t in mine["data"]] == [
        ("red", [1.0], [40.0])
    ]
    r = quiet.get("/api/v1/history/tenants", params={"tenant": "blue"}, headers=alice)
    assert r.status_code == 403
    blue = _get(quiet, "tenants", admin, from_s=0, to_s=30, tenant="blue")
    assert [t["tenant"] for t in blue["data"]] == ["blue"]
    # A sample at 30 s where red has no job: red had none then, not "not known".
    nodes = [make_node("a", {0: [("j2", 1.0)]}, 0.5)]
    with quiet.app.state.sessions() as session:  # type: ignore[attr-defined]
        write(session, build_sample(30.0, 30.0, nodes, {}, {"j2": "blue"}, []))
        session.commit()
    red = _get(quiet, "tenants", alice, from_s=0, to_s=60, step_s=60)["data"][0]
    assert (red["gpus"], red["waiting"], red["wait_max_s"]) == ([0.5], [0.5], [40.0])


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"last_s": 60, "from_s": 0}, "last_s"),
        ({"from_s": 100, "to_s": 50}, "to_s"),
        ({"last_s": 86400, "step_s": 1}, "step_s"),
        ({"last_s": 0}, "last_s"),
        ({"from_s": "nan"}, "from_s"),
        ({"step_s": "soon"}, "step_s"),
        ({"window": 5}, "window"),
    ],
)
def test_a_bad_window_is_a_422_naming_the_field(
    quiet: TestClient, query: dict[str, Any], field: str
) -> None:
    admin = auth(quiet, "root", "ops", "admin")
    r = quiet.get("/api/v1/history/cluster", params=query, headers=admin)
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["query", field]]


def test_an_unknown_node_is_a_404_and_the_routes_are_documented(quiet: TestClient) -> None:
    admin = auth(quiet, "root", "ops", "admin")
    _write(quiet, 0.0, 0.5, 50, [])
    r = quiet.get("/api/v1/history/nodes/zz/gpus", headers=admin)
    assert r.status_code == 404 and "zz" in r.json()["detail"]
    # A node sampled now but not in the window is known: empty series, no 404.
    assert _get(quiet, "nodes/a/gpus", admin, from_s=-600, to_s=-300)["gpus"] == []
    paths = quiet.get("/openapi.json").json()["paths"]
    for path in ("cluster", "nodes", "nodes/{name}/gpus", "tenants"):
        op = paths[f"/api/v1/history/{path}"]["get"]
        assert {"200", "422"} <= set(op["responses"]), path
        assert op["summary"] and op["description"]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_the_service_samples_a_running_cluster(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Local mode (2x4 GPUs, 100 x the wall clock, a sample every 30 simulated s): a
    4-GPU job of tenant red runs, a 6-GPU one of blue waits behind it."""
    base: Settings = (
        migrated_sqlite(tmp_path)
        if database == "sqlite"
        else request.getfixturevalue("pg_settings")
    )
    with TestClient(create_app(base)) as client:
        red = auth(client, "rosa", "red")
        blue = auth(client, "bo", "blue")
        admin = auth(client, "root", "ops", "admin")
        submit(client, red, num_gpus=4, duration_s=86400.0)
        submit(client, blue, num_gpus=6, duration_s=600.0)

        def sampled() -> Any:
            body = _get(client, "cluster", admin, last_s=600, step_s=30)
            full = [i for i, g in enumerate(body["gpus_allocated"]) if g == 4.0]
            return body if full and body["waiting"][full[-1]] == 1.0 else None

        body = wait_for(sampled, timeout_s=30)
        last = max(i for i, g in enumerate(body["gpus_allocated"]) if g == 4.0)
        assert body["gpus"][last] == 8.0 and body["wait_max_s"][last] > 0
        assert 0 < body["util"][last] <= 0.5  # 4 busy GPUs of 8

        def held() -> dict[str, float | None] | None:
            # The last 30-s bin once two samples in a row saw red's job run (before it
            # started, red held nothing: a wider bin's mean is less than 4).
            rows = _get(client, "tenants", admin, last_s=300, step_s=30)["data"]
            last = {t["tenant"]: t["gpus"][-1] for t in rows}
            return last if last.get("red") == 4.0 else None

        assert wait_for(held, timeout_s=30) == {"blue": 0.0, "red": 4.0}
        nodes = _get(client, "nodes", admin, last_s=600)
        assert nodes["count"] == 2
        node = nodes["data"][0]["node"]
        gpus = _get(client, f"nodes/{node}/gpus", admin, last_s=600)["gpus"]
        # Local mode: memory the jobs reserve on the GPUs they hold, no NVML figures.
        assert any(v for g in gpus for v in g["mem_used_mib"] if v)
        assert all(v is None for g in gpus for v in g["temperature_c"])


def test_a_second_sampler_on_the_same_database_does_not_sample_twice(quiet: TestClient) -> None:
    """A restarted service, or a second API replica, finds the newest sample younger
    than the period and skips: one sample a period, however many samplers."""
    app: Any = quiet.app
    settings: Settings = app.state.settings
    first, second = (Sampler(app.state.backend, app.state.sessions, settings) for _ in range(2))
    assert first.tick() is True
    assert second.tick() is False
    with app.state.sessions() as session:
        assert session.scalar(select(func.count()).select_from(ClusterSample)) == 1
