"""Each queue's GPUs over time (GET /quotas/series, api/quotas/series.py): the bins'
time-weighted means from the jobs' events, in local mode on PostgreSQL and SQLite;
bad parameters are 422s naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.quotas.series import Step, binned, steps_of
from tests.api.builders import auth, submit, wait_for

QUEUES = "/api/v1/quotas"
SERIES = f"{QUEUES}/series"


@pytest.fixture(params=["postgresql", "sqlite"])
def api(request: pytest.FixtureRequest) -> TestClient:
    client: TestClient = request.getfixturevalue(
        "client" if request.param == "postgresql" else "sqlite_client"
    )
    return client


@pytest.mark.parametrize(
    ("steps", "want"),
    [
        # 4 GPUs from 5 to 25 over bins of 10 from 0: half, whole, half.
        ([Step(5, 4), Step(25, 0)], [2.0, 4.0, 2.0, 0.0]),
        # Started before the window, still running at its end.
        ([Step(-50, 2)], [2.0, 2.0, 2.0, 2.0]),
        # Resized from 2 to 6 at 10, preempted at 12, back with 1 at 30.
        ([Step(0, 2), Step(10, 6), Step(12, 0), Step(30, 1)], [2.0, 1.2, 0.0, 1.0]),
        # Over before the window: nothing.
        ([Step(-30, 8), Step(-10, 0)], [0.0] * 4),
    ],
)
def test_bins_are_time_weighted_means(steps: list[Step], want: list[float]) -> None:
    assert binned(steps, 0.0, 10.0, 4) == pytest.approx(want)


def test_events_give_the_allocation_or_the_job_size() -> None:
    events = [
        ("submitted", 0.0, None),
        ("started", 1.0, [{"node": "n0", "gpus": [0, 1]}, {"node": "n1", "gpus": [3]}]),
        ("admitted", 1.5, None),
        ("preempted", 2.0, None),
        ("started", 3.0, None),
        ("finished", 4.0, None),
    ]
    assert steps_of(events, 4) == [Step(1.0, 3.0), Step(2.0, 0.0), Step(3.0, 4.0), Step(4.0, 0.0)]


def test_a_queue_series_integrates_to_its_gpu_seconds(api: TestClient) -> None:
    admin = auth(api, "root", "ops", "admin")
    for name, body in {
        "org": {"guarantee": 8},
        "team-a": {"parent": "org", "guarantee": 5, "tenants": ["team-a", "vision"]},
        "team-b": {"parent": "org", "guarantee": 3, "limit": 6},
    }.items():
        assert api.put(f"{QUEUES}/{name}", json=body, headers=admin).status_code == 201
    vic = auth(api, "vic", "vision")
    job = submit(api, vic, num_gpus=6, duration_s=1e6)
    url = f"/api/v1/jobs/{job['id']}"
    started = wait_for(lambda: (j := api.get(url, headers=vic).json())["first_start_s"] and j)
    wait_for(lambda: api.get(SERIES, headers=vic).json()["now_s"] > started["first_start_s"] + 50)
    assert api.post(f"{url}/cancel", headers=admin).status_code == 200
    events = api.get(f"{url}/events", headers=vic).json()["data"]
    (cancelled,) = [e["sim_s"] for e in events if e["kind"] == "cancelled"]
    held_s = cancelled - started["first_start_s"]
    wait_for(lambda: api.get(SERIES, headers=vic).json()["now_s"] > cancelled + 100)
    # A window that holds the job's whole run (with a margin: time runs 100 times the
    # wall clock): 6 GPUs over its run, in GPU-seconds.
    window_s = api.get(SERIES, headers=vic).json()["now_s"] - started["first_start_s"] + 5000
    r = api.get(SERIES, params={"window_s": window_s, "points": 1000}, headers=vic)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert len(body["t_s"]) == 1000 and body["bin_s"] == pytest.approx(window_s / 1000)
    rows = {row["name"]: row for row in body["data"]}
    assert list(rows) == ["org", "team-a", "team-b"]
    area = sum(rows["team-a"]["gpus"]) * body["bin_s"]
    assert area == pytest.approx(6 * held_s, rel=0.01, abs=1.0)
    assert rows["org"]["gpus"] == rows["team-a"]["gpus"]  # its subtree's
    assert set(rows["team-b"]["gpus"]) == {0.0}
    assert max(rows["team-a"]["gpus"]) == pytest.approx(6.0)  # bins (~5 s) inside its run
    assert (rows["team-b"]["guarantee_gpus"], rows["team-b"]["limit_gpus"]) == (3, 6)
    gpus = zip(body["t_s"], rows["team-a"]["gpus"], strict=True)
    after = [g for t, g in gpus if t >= cancelled]
    assert after and set(after) == {0.0}  # nothing held once cancelled


@pytest.mark.parametrize(
    ("params", "field"),
    [({"points": 1}, "points"), ({"points": 5000}, "points"), ({"window_s": 0}, "window_s"),
     ({"window_s": "soon"}, "window_s")],
)  # fmt: skip
def test_bad_parameters_are_422_naming_the_field(
    api: TestClient, params: dict[str, Any], field: str
) -> None:
    user = auth(api, "ann", "team-a")
    r = api.get(SERIES, params=params, headers=user)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["query", field]


def test_no_queues_no_series(api: TestClient) -> None:
    user = auth(api, "ann", "team-a")
    body = api.get(SERIES, headers=user).json()
    assert (body["t_s"], body["data"]) == ([], [])
