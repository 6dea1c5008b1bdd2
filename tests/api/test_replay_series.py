"""A replay's series for the dashboard's charts and its result files as downloads."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.replays import series as replay_series
from api.store.models import Replay
from tests.api.builders import auth, upload_trace, wait_for

REPLAYS = "/api/v1/replays"


def _succeeded(client: TestClient, headers: dict[str, str], trace: dict[str, Any]) -> int:
    body = {"trace_id": trace["id"], "policy": "srtf", "cluster": "2x4"}
    r = client.post(REPLAYS, json=body, headers=headers)
    assert r.status_code == 202, r.text
    replay_id: int = r.json()["id"]

    def done() -> bool:
        status = client.get(f"{REPLAYS}/{replay_id}", headers=headers).json()["status"]
        assert status != "failed"
        return bool(status == "succeeded")

    wait_for(done, timeout_s=60, every_s=0.2)
    return replay_id


def test_the_series_agree_with_the_stored_summary_and_files(
    sqlite_client: TestClient, trace_file: Path
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    replay_id = _succeeded(sqlite_client, alice, upload_trace(sqlite_client, alice, trace_file))
    summary = sqlite_client.get(f"{REPLAYS}/{replay_id}/results", headers=alice).json()["summary"]
    r = sqlite_client.get(f"{REPLAYS}/{replay_id}/series", headers=alice)
    assert r.status_code == 200, r.text
    series = r.json()
    assert (series["id"], series["policy"], series["jobs"]) == (replay_id, "srtf", 40)
    jcts = series["jct_s"]
    assert len(jcts) == summary["finished"] and jcts == sorted(jcts)
    assert statistics.fmean(jcts) == pytest.approx(summary["avg_jct_s"])
    assert series["jct_fraction"][0] == pytest.approx(1 / len(jcts))
    assert series["jct_fraction"][-1] == 1.0
    fairness = series["fairness"]
    assert fairness["jain_index"] == summary["jain_index"]
    assert len(fairness["ftf_rho"]) == summary["ftf_jobs"]
    assert max(fairness["ftf_rho"]) == pytest.approx(summary["max_ftf_rho"])

    timeline = series["timeline"]
    download = sqlite_client.get(f"{REPLAYS}/{replay_id}/files/timeline.csv", headers=alice)
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/csv")
    assert f'filename="replay-{replay_id}-timeline.csv"' in download.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert len(timeline["t_s"]) == len(rows) > 1
    assert timeline["queued"] == [float(row["queued"]) for row in rows]
    assert all(len(v) == len(rows) for v in timeline.values())


def test_series_and_files_are_refused_to_other_tenants_unfinished_and_unlisted(
    sqlite_client: TestClient, trace_file: Path
) -> None:
    alice = auth(sqlite_client, "alice", "vision")
    bob = auth(sqlite_client, "bob", "speech")
    replay_id = _succeeded(sqlite_client, alice, upload_trace(sqlite_client, alice, trace_file))
    for path in ("series", "files/jobs.csv"):
        assert sqlite_client.get(f"{REPLAYS}/{replay_id}/{path}", headers=bob).status_code == 404
    for name in ("jct_cdf.png", "..%2Fsummary.json", "replays.db"):
        r = sqlite_client.get(f"{REPLAYS}/{replay_id}/files/{name}", headers=alice)
        assert r.status_code in (404, 422), (name, r.status_code)
        if r.status_code == 422:
            assert r.json()["detail"][0]["loc"] == ["path", "name"]

    sessions = sqlite_client.app.state.sessions  # type: ignore[attr-defined]
    with sessions() as session:
        done = session.get(Replay, replay_id)
        assert done is not None
        queued = Replay(
            tenant=done.tenant,
            user_id=done.user_id,
            trace_id=done.trace_id,
            policy="fifo",
            cluster="2x4",
            placement="consolidated",
            interval_s=60.0,
            seed=0,
            status="queued",
        )
        session.add(queued)
        session.commit()
        queued_id = queued.id
    r = sqlite_client.get(f"{REPLAYS}/{queued_id}/series", headers=alice)
    assert r.status_code == 404 and "no results (queued)" in r.json()["detail"]


@pytest.mark.parametrize(
    ("n", "points"),
    [(0, 0), (1, 1), (replay_series.MAX_POINTS, replay_series.MAX_POINTS), (10_000, 2000)],
)
def test_a_long_cdf_is_thinned_to_exact_quantiles(n: int, points: int) -> None:
    values = [float(v) for v in reversed(range(n))]
    xs, fractions = replay_series._cdf(values)
    assert len(xs) == len(fractions) == points
    assert xs == sorted(xs)
    for x, fraction in zip(xs, fractions, strict=True):  # values 0..n-1: rank x has x+1 at or below
        assert fraction == pytest.approx((x + 1) / n)
    if n:
        assert (xs[0], xs[-1], fractions[-1]) == (0.0, n - 1, 1.0)


@pytest.mark.parametrize("n", [5, replay_series.MAX_POINTS + 1, 10_007])
def test_a_long_timeline_keeps_its_first_and_last_samples(n: int) -> None:
    rows = [{"t_s": str(i)} for i in range(n)]
    kept = replay_series._every_kth(rows)
    assert len(kept) <= replay_series.MAX_POINTS
    assert kept[0] is rows[0] and kept[-1] is rows[-1]
