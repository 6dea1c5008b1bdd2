"""A finished replay's series for the dashboard's charts, read from its report files.

Called by api.routes.replays (`GET /replays/{id}/series`). api.replays.run had
controller.report.write_replay leave jobs.csv (one row per job, `jct_s` and `ftf_rho`
empty where undefined) and timeline.csv (one row per scheduling round) in the
replay's out_dir; the fairness figures come from its stored summary. The same
directory's downloadable files are named in `DOWNLOADS`, a fixed allow-list.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from api.schemas.replays import ReplayFairness, ReplaySeries, ReplayTimeline

# A chart is at most ~1,000 pixel columns wide: 2,000 points is two a column. Sorted
# values (JCTs, rhos) are thinned to evenly spaced quantiles that keep the first and
# last, so the CDF stays exact at every point sent; the timeline takes every k-th
# sample plus the last (a spike shorter than k rounds may vanish; timeline.csv keeps all).
MAX_POINTS = 2000
DownloadName = Literal["summary.json", "jobs.csv", "timeline.csv"]
DOWNLOADS: dict[str, str] = {
    "summary.json": "application/json",
    "jobs.csv": "text/csv",
    "timeline.csv": "text/csv",
}
FAIRNESS_KEYS = ("ftf_jobs", "jain_index", "avg_ftf_rho", "max_ftf_rho", "frac_ftf_rho_gt_1")


class SeriesMissing(Exception):
    """The replay's report files are gone or unreadable (a 404 to the caller)."""


def read_series(
    replay_id: int, policy: str, cluster: str, out_dir: Path, summary: Mapping[str, Any]
) -> ReplaySeries:
    """The series of the replay whose report is in `out_dir`."""
    try:
        jobs = _read_csv(out_dir / "jobs.csv")
        samples = _read_csv(out_dir / "timeline.csv")
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise SeriesMissing(f"replay {replay_id} has no readable report files") from exc
    jct_s, jct_fraction = _cdf([v for v in _column(jobs, "jct_s") if v is not None])
    rho, rho_fraction = _cdf([v for v in _column(jobs, "ftf_rho") if v is not None])
    kept = _every_kth(samples)
    timeline = ReplayTimeline(
        **{
            name: [float(v or 0.0) for v in _column(kept, name)]
            for name in ReplayTimeline.model_fields
        }
    )
    figures = {key: summary.get(key) for key in FAIRNESS_KEYS}
    return ReplaySeries(
        id=replay_id,
        policy=policy,
        cluster=cluster,
        jobs=len(jobs),
        jct_s=jct_s,
        jct_fraction=jct_fraction,
        timeline=timeline,
        fairness=ReplayFairness(**figures, ftf_rho=rho, ftf_fraction=rho_fraction),
    )


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _column(rows: Sequence[Mapping[str, str]], name: str) -> list[float | None]:
    """A numeric column; an empty or missing cell is None."""
    return [float(row[name]) if row.get(name) else None for row in rows]


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    """Sorted values and the fraction of all values at or below each, thinned to at
    most MAX_POINTS evenly spaced ranks (the first and the last always kept)."""
    ordered = sorted(values)
    n = len(ordered)
    if n <= MAX_POINTS:
        ranks = list(range(n))
    else:
        ranks = [round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)]
    return [ordered[r] for r in ranks], [(r + 1) / n for r in ranks]


def _every_kth(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    if len(rows) <= MAX_POINTS:
        return rows
    k = -(-len(rows) // (MAX_POINTS - 1))  # ceil: leaves room for the last sample
    kept = rows[::k]
    return kept if kept[-1] is rows[-1] else [*kept, rows[-1]]
