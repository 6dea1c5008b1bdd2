"""Replay reports on disk: JSON and CSV for tools, PNG plots for people.

Called by the CLI after one replay (`write_replay`) or after replaying a trace
under several policies (`write_comparison`). Figures are computed by
controller.metrics; this module only lays them out. Plots use matplotlib's object
API (`Figure`, rendered by Agg on save) and never pyplot, so nothing touches
global state or needs a display.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from operator import attrgetter
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from controller.metrics import Summary, finish_time_fairness
from controller.records import JobOutcome, ReplayResult, TimelineSample

# A 10-inch plot at 100 dpi has about 1,000 pixel columns: 5,000 points is five a
# column, more than the eye resolves. Thinning takes every k-th point, so a spike
# shorter than k samples may vanish from a plot; the CSV keeps every sample.
MAX_PLOT_POINTS = 5000
DPI = 100

JOB_FIELDS = tuple(f.name for f in fields(JobOutcome))
JOB_COLUMNS = (*JOB_FIELDS, "jct_s", "queueing_s", "ftf_rho", "deadline_met")
TIMELINE_COLUMNS = tuple(f.name for f in fields(TimelineSample))
RUN_COLUMNS = ("policy", "cluster", "trace", "rounds", "wall_s")

# A CSV row: its cells in the order of the file's columns.
Row = Sequence[object]


def write_replay(out_dir: Path, result: ReplayResult, summary: Summary) -> list[Path]:
    """Write one replay's report into `out_dir` (created if missing); return the paths.

    summary.json: the run (policy, cluster, trace, rounds, wall_s, params) and
    `summary.to_dict()` under "summary". jobs.csv: one row per job, every
    JobOutcome field plus jct_s, queueing_s, ftf_rho and deadline_met (empty where
    undefined).
    timeline.csv: one row per sample. Plots: jct_cdf.png, utilization.png,
    queue.png. With queues, queues.csv and queues.png (controller.quotas.report).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    title = _run_title(result)
    return [
        _write_json(out_dir / "summary.json", _run_record(result, summary)),
        _write_csv(out_dir / "jobs.csv", JOB_COLUMNS, _job_rows(result)),
        _write_csv(
            out_dir / "timeline.csv",
            TIMELINE_COLUMNS,
            map(attrgetter(*TIMELINE_COLUMNS), result.timeline),
        ),
        _plot_jct_cdfs(out_dir / "jct_cdf.png", [(result.policy, result)], f"JCT CDF: {title}"),
        _plot_utilization(out_dir / "utilization.png", result, summary, title),
        _plot_queue(out_dir / "queue.png", result, title),
        *_queue_shares(out_dir, result, title),
    ]


def _queue_shares(out_dir: Path, result: ReplayResult, title: str) -> list[Path]:
    """queues.csv and queues.png when the replay had queues (controller.quotas.report)."""
    rows = result.params.get("queue_shares")
    if not isinstance(rows, list):
        return []
    from controller.quotas.report import write_quota_shares

    return write_quota_shares(out_dir, rows, title)


def write_comparison(out_dir: Path, results: Sequence[tuple[ReplayResult, Summary]]) -> list[Path]:
    """Write a side-by-side report of several replays into `out_dir`; return the paths.

    compare.json: {"runs": [one summary.json record per replay]}. compare.csv: one
    row per replay, the run columns then the summary's. Plots: compare_jct_cdf.png
    and compare_bars.png. Replays are labelled by policy, with the trace added
    where two share a policy.
    """
    if not results:
        raise ValueError("write_comparison needs at least one replay")
    out_dir.mkdir(parents=True, exist_ok=True)
    records = [_run_record(result, summary) for result, summary in results]
    rows = [
        (*(record[key] for key in RUN_COLUMNS), *summary.to_dict().values())
        for record, (_, summary) in zip(records, results, strict=True)
    ]
    columns = (*RUN_COLUMNS, *results[0][1].to_dict())
    labels = _unique_labels([result for result, _ in results])
    curves = [(label, result) for label, (result, _) in zip(labels, results, strict=True)]
    return [
        _write_json(out_dir / "compare.json", {"runs": records}),
        _write_csv(out_dir / "compare.csv", columns, rows),
        _plot_jct_cdfs(out_dir / "compare_jct_cdf.png", curves, "JCT CDF by policy"),
        _plot_bars(out_dir / "compare_bars.png", labels, [s for _, s in results]),
    ]


# --- records ---------------------------------------------------------------------


def _run_record(result: ReplayResult, summary: Summary) -> dict[str, object]:
    return {
        "policy": result.policy,
        "cluster": result.cluster,
        "trace": result.trace,
        "rounds": result.rounds,
        "wall_s": result.wall_s,
        # queue_shares, a row per round and queue, goes to queues.csv instead.
        "params": {k: v for k, v in result.params.items() if k != "queue_shares"},
        "summary": summary.to_dict(),
    }


def _job_rows(result: ReplayResult) -> list[Row]:
    """One row per job in JOB_COLUMNS order: its fields, then jct_s, queueing_s, ftf_rho
    and deadline_met."""
    rhos = finish_time_fairness(result)
    outcome = attrgetter(*JOB_FIELDS)
    return [
        (*outcome(job), job.jct_s, job.queueing_s, rhos.get(job.job_id), job.deadline_met)
        for job in result.jobs
    ]


def _write_json(path: Path, record: object) -> Path:
    text = json.dumps(_json_safe(record), indent=2, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _json_safe(value: object) -> object:
    """NaN and infinities become null and unknown objects (say a Path in params) strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return str(value)


def _write_csv(path: Path, columns: Sequence[str], rows: Iterable[Row]) -> Path:
    """Write `rows` (cells in `columns` order) with a header; None becomes an empty cell
    (the csv module's own rule), floats keep full precision."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


# --- plots -----------------------------------------------------------------------


def _plot_jct_cdfs(path: Path, curves: Sequence[tuple[str, ReplayResult]], title: str) -> Path:
    """JCT CDFs on a log x axis. y is the fraction of all submitted jobs, so a curve
    tops out below 1 when jobs were left unfinished and policies compare fairly."""
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    finished = [sorted(j.jct_s for j in r.jobs if j.jct_s is not None) for _, r in curves]
    unit, per_unit_s = _time_unit(max((jcts[-1] for jcts in finished if jcts), default=0.0))
    for (label, result), jcts in zip(curves, finished, strict=True):
        if not jcts:
            continue
        x = np.asarray(jcts) / per_unit_s
        y = np.arange(1, len(jcts) + 1) / len(result.jobs)
        keep = _thin(len(x))
        done = f"{len(jcts)}/{len(result.jobs)} finished"
        ax.step(x[keep], y[keep], where="post", label=f"{label} ({done})")
    if any(any(t > 0.0 for t in jcts) for jcts in finished):
        ax.set_xscale("log")
        ax.legend(loc="lower right")
    else:
        _no_data(ax, "no finished jobs")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel(f"job completion time ({unit})")
    ax.set_ylabel("fraction of jobs finished")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, path)


def _plot_utilization(path: Path, result: ReplayResult, summary: Summary, title: str) -> Path:
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.add_subplot()
    samples = _thinned(result.timeline)
    unit, per_unit_s = _time_unit(samples[-1].t_s if samples else 0.0)
    if samples:
        t = np.array([s.t_s for s in samples]) / per_unit_s
        ax.step(t, [s.gpus_total for s in samples], where="post", color="black", label="up")
        allocated = f"allocated (mean {summary.gpu_allocation:.0%} of up)"
        busy = f"busy (mean {summary.gpu_utilization:.0%} of up)"
        ax.step(t, [s.gpus_allocated for s in samples], where="post", label=allocated)
        ax.step(t, [s.gpus_busy for s in samples], where="post", label=busy)
        ax.step(
            t,
            [s.gpus_unallocatable for s in samples],
            where="post",
            label="idle, unusable by waiting jobs (fragmentation)",
        )
        ax.legend(loc="lower right")
    else:
        _no_data(ax, "no timeline samples")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("GPUs")
    ax.set_title(f"GPUs up, allocated and busy: {title}")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def _plot_queue(path: Path, result: ReplayResult, title: str) -> Path:
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.add_subplot()
    samples = _thinned(result.timeline)
    unit, per_unit_s = _time_unit(samples[-1].t_s if samples else 0.0)
    if samples:
        t = np.array([s.t_s for s in samples]) / per_unit_s
        ax.step(t, [s.queued for s in samples], where="post", label="queued")
        ax.step(t, [s.running for s in samples], where="post", label="running")
        ax.legend(loc="upper right")
    else:
        _no_data(ax, "no timeline samples")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("jobs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Queued and running jobs: {title}")
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def _plot_bars(path: Path, labels: Sequence[str], summaries: Sequence[Summary]) -> Path:
    """Average JCT, p99 JCT, makespan and GPU utilisation, one panel each."""
    panels: list[tuple[str, list[float | None], bool]] = [
        ("average JCT", [s.avg_jct_s for s in summaries], True),
        ("p99 JCT", [s.p99_jct_s for s in summaries], True),
        ("makespan", [s.makespan_s for s in summaries], True),
        ("GPU utilisation", [100.0 * s.gpu_utilization for s in summaries], False),
    ]
    fig = Figure(figsize=(4 + 1.2 * len(labels) * len(panels), 4.5), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    positions = list(range(len(labels)))
    colors = [f"C{i % 10}" for i in positions]
    for ax, (name, values, is_time) in zip(axes, panels, strict=True):
        unit, per_unit = _time_unit(max((v for v in values if v is not None), default=0.0))
        if not is_time:
            unit, per_unit = "% of GPU-time up", 1.0
        heights = [0.0 if v is None else v / per_unit for v in values]
        texts = ["n/a" if v is None else f"{h:.3g}" for v, h in zip(values, heights, strict=True)]
        ax.bar_label(ax.bar(positions, heights, color=colors), texts)
        ax.set_xticks(positions, labels, rotation=30, ha="right")
        ax.set_ylabel(f"{name} ({unit})")
        ax.set_title(name)
        ax.margins(y=0.15)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Policies compared")
    return _save(fig, path)


def _no_data(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center")


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _time_unit(span_s: float) -> tuple[str, float]:
    """Seconds, minutes or hours, whichever keeps an axis spanning `span_s` readable."""
    if span_s >= 2 * 3600:
        return "h", 3600.0
    if span_s >= 2 * 60:
        return "min", 60.0
    return "s", 1.0


def _thin(n: int) -> np.ndarray:
    """At most MAX_PLOT_POINTS evenly spaced indices into n points, first and last kept."""
    if n <= MAX_PLOT_POINTS:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, MAX_PLOT_POINTS).round().astype(int))


def _thinned(timeline: Sequence[TimelineSample]) -> list[TimelineSample]:
    return [timeline[i] for i in _thin(len(timeline))]


def _run_title(result: ReplayResult) -> str:
    return f"{result.policy} on {result.cluster}, trace {result.trace}"


def _unique_labels(results: Sequence[ReplayResult]) -> list[str]:
    """Policy names; with the trace where policies repeat; with a number if still equal."""
    counts = Counter(r.policy for r in results)
    labels = [r.policy if counts[r.policy] == 1 else f"{r.policy} ({r.trace})" for r in results]
    counts = Counter(labels)
    return [f"{label} #{i + 1}" if counts[label] > 1 else label for i, label in enumerate(labels)]
