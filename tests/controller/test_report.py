"""Reports on disk: files exist, parse back to what was summarised, plots are PNGs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from controller.metrics import summarize
from controller.records import ReplayResult
from controller.report import MAX_PLOT_POINTS, write_comparison, write_replay
from tests.controller.test_metrics import make_outcome, make_result, make_sample

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPLAY_FILES = [
    "summary.json",
    "jobs.csv",
    "timeline.csv",
    "jct_cdf.png",
    "utilization.png",
    "queue.png",
]
COMPARE_FILES = ["compare.json", "compare.csv", "compare_jct_cdf.png", "compare_bars.png"]


def small_replay(
    policy: str = "fifo", *, stretch: float = 1.0, trace: str = "tiny"
) -> ReplayResult:
    jobs = [
        make_outcome("a", submit_s=0.0, start_s=0.0, finish_s=100.0 * stretch, num_gpus=4),
        make_outcome("b", submit_s=10.0, start_s=100.0 * stretch, finish_s=400.0 * stretch),
        make_outcome("c", submit_s=20.0, start_s=150.0, preemptions=1, restarts=1),
        make_outcome("d", submit_s=30.0),
    ]
    timeline = [
        make_sample(t, allocated=min(8.0, t / 50), busy=min(7.0, t / 60), queued=2, running=2)
        for t in range(0, 500, 10)
    ]
    result = make_result(
        jobs, timeline, policy=policy, trace=trace, capacity=4000.0, allocated=3000.0, busy=2500.0
    )
    result.params = {"round_s": 10.0, "seed": 7, "trace_path": Path("/traces/tiny.csv")}
    return result


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # axes, labels and curves, not a blank canvas


def strict_json(path: Path) -> object:
    """Parse JSON, refusing NaN and Infinity, which the standard does not allow."""

    def refuse(name: str) -> object:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


# --- one replay --------------------------------------------------------------------


def test_write_replay_writes_every_file(tmp_path: Path) -> None:
    result = small_replay()
    paths = write_replay(tmp_path / "out", result, summarize(result))
    assert [p.name for p in paths] == REPLAY_FILES
    assert all(p.parent == tmp_path / "out" and p.is_file() for p in paths)
    for path in paths:
        if path.suffix == ".png":
            assert_png(path)


def test_summary_json_holds_the_run_and_its_summary(tmp_path: Path) -> None:
    result = small_replay()
    summary = summarize(result)
    write_replay(tmp_path, result, summary)
    record = strict_json(tmp_path / "summary.json")
    assert isinstance(record, dict)
    assert record["policy"] == "fifo"
    assert record["cluster"] == "one-node"
    assert record["trace"] == "tiny"
    assert record["rounds"] == 50
    assert record["wall_s"] == 1.5
    assert record["params"] == {"round_s": 10.0, "seed": 7, "trace_path": "/traces/tiny.csv"}
    assert record["summary"] == summary.to_dict()


def test_jobs_csv_has_one_row_per_job_with_derived_columns(tmp_path: Path) -> None:
    result = small_replay()
    write_replay(tmp_path, result, summarize(result))
    rows = read_csv(tmp_path / "jobs.csv")
    assert [row["job_id"] for row in rows] == ["a", "b", "c", "d"]
    a, b, c, d = rows
    assert float(a["jct_s"]) == 100.0
    assert float(a["queueing_s"]) == 0.0
    assert int(a["num_gpus"]) == 4
    assert float(b["jct_s"]) == 390.0
    assert float(b["queueing_s"]) == 90.0
    assert (c["jct_s"], c["finish_s"], float(c["queueing_s"])) == ("", "", 130.0)
    assert (int(c["preemptions"]), int(c["restarts"])) == (1, 1)
    assert d["first_start_s"] == d["queueing_s"] == d["ftf_rho"] == ""
    # 8 GPUs, contention 1: a's share fits, T_id = nominal 100 = JCT.
    assert float(a["ftf_rho"]) == pytest.approx(1.0)
    assert {"tenant", "model", "attained_gpu_s", "executed_s", "contention_avg"} <= set(a)


def test_timeline_csv_round_trips(tmp_path: Path) -> None:
    result = small_replay()
    write_replay(tmp_path, result, summarize(result))
    rows = read_csv(tmp_path / "timeline.csv")
    assert len(rows) == len(result.timeline)
    for row, sample in zip(rows, result.timeline, strict=True):
        assert float(row["t_s"]) == sample.t_s
        assert int(row["gpus_total"]) == sample.gpus_total
        assert float(row["gpus_allocated"]) == sample.gpus_allocated  # full precision
        assert float(row["gpus_busy"]) == sample.gpus_busy
        assert (int(row["queued"]), int(row["running"])) == (sample.queued, sample.running)


def test_empty_replay_still_writes_a_report(tmp_path: Path) -> None:
    result = make_result()
    paths = write_replay(tmp_path, result, summarize(result))
    assert [p.name for p in paths] == REPLAY_FILES
    assert read_csv(tmp_path / "jobs.csv") == []
    assert read_csv(tmp_path / "timeline.csv") == []
    record = strict_json(tmp_path / "summary.json")
    assert isinstance(record, dict)
    assert record["summary"]["avg_jct_s"] is None
    for path in paths:
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == PNG_MAGIC


def test_single_job_and_zero_jct_plot_without_warnings(tmp_path: Path) -> None:
    # Warnings are errors: a log axis over one value or over a zero must not warn.
    one = make_result([make_outcome("a", start_s=0.0, finish_s=5.0)], [make_sample(0.0)])
    write_replay(tmp_path / "one", one, summarize(one))
    zero = make_result([make_outcome("z", start_s=0.0, finish_s=0.0, nominal_s=1.0)])
    write_replay(tmp_path / "zero", zero, summarize(zero))


def test_long_timeline_is_thinned_for_plots_but_kept_in_csv(tmp_path: Path) -> None:
    n = 3 * MAX_PLOT_POINTS
    timeline = [make_sample(60.0 * i, allocated=i % 9, busy=i % 7, running=i % 5) for i in range(n)]
    jobs = [make_outcome(f"j{i}", start_s=0.0, finish_s=60.0 * (i + 1)) for i in range(n)]
    result = make_result(jobs, timeline, capacity=1.0, allocated=0.5, busy=0.4)
    paths = write_replay(tmp_path, result, summarize(result))
    assert len(read_csv(tmp_path / "timeline.csv")) == n
    for path in paths:
        if path.suffix == ".png":
            assert_png(path)


def test_non_finite_params_are_written_as_null(tmp_path: Path) -> None:
    result = small_replay()
    result.params = {"alpha": math.nan, "limits": (1, math.inf)}
    write_replay(tmp_path, result, summarize(result))
    record = strict_json(tmp_path / "summary.json")
    assert isinstance(record, dict)
    assert record["params"] == {"alpha": None, "limits": [1, None]}


# --- comparisons -------------------------------------------------------------------


def test_write_comparison_writes_one_row_per_policy(tmp_path: Path) -> None:
    runs = [small_replay("fifo"), small_replay("tiresias", stretch=0.5), make_result(policy="x")]
    pairs = [(result, summarize(result)) for result in runs]
    paths = write_comparison(tmp_path / "cmp", pairs)
    assert [p.name for p in paths] == COMPARE_FILES
    for path in paths:
        if path.suffix == ".png":
            assert_png(path)

    rows = read_csv(tmp_path / "cmp" / "compare.csv")
    assert [row["policy"] for row in rows] == ["fifo", "tiresias", "x"]
    assert list(rows[0])[:5] == ["policy", "cluster", "trace", "rounds", "wall_s"]
    assert float(rows[0]["avg_jct_s"]) == pytest.approx(245.0)  # (100 + 390) / 2
    assert float(rows[1]["avg_jct_s"]) == pytest.approx(120.0)  # (50 + 190) / 2
    assert rows[2]["avg_jct_s"] == ""
    assert int(rows[2]["jobs"]) == 0

    record = strict_json(tmp_path / "cmp" / "compare.json")
    assert isinstance(record, dict)
    assert [run["policy"] for run in record["runs"]] == ["fifo", "tiresias", "x"]
    assert record["runs"][1]["summary"] == pairs[1][1].to_dict()


def test_write_comparison_handles_a_repeated_policy(tmp_path: Path) -> None:
    runs = [small_replay("fifo", trace=trace) for trace in ("a", "b", "b")]
    paths = write_comparison(tmp_path, [(r, summarize(r)) for r in runs])
    assert len(read_csv(tmp_path / "compare.csv")) == 3
    assert_png(paths[-1])


def test_write_comparison_refuses_nothing_to_compare(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        write_comparison(tmp_path, [])
