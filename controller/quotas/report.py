"""Each queue's GPU share over a replay, against its guarantee: queues.csv and queues.png.

`share_rows` turns a replay's controller.quotas.ledger.QuotaLedger into rows, which
the replay command (gpuflow/cli.py) keeps in the result's params as `queue_shares`;
controller.report.write_replay calls `write_quota_shares` for them. Plots use
matplotlib's object API, as controller.report does.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from controller.metrics import finish_time_fairness
from controller.quotas.ledger import QuotaLedger
from controller.records import ReplayResult

COLUMNS = ("t_s", "queue", "held_gpus", "deserved_gpus", "guarantee_gpus", "has_demand")
DPI = 100


def share_rows(ledger: QuotaLedger) -> list[dict[str, object]]:
    """One row per round and leaf, in time order."""
    guarantee = {}
    for name in ledger.leaves:
        node = ledger.tree.node(name)
        assert node is not None
        guarantee[name] = node.guarantee.total
    rows: list[dict[str, object]] = []
    for sample in ledger.samples:
        for k, name in enumerate(ledger.leaves):
            rows.append(
                {
                    "t_s": sample.t_s,
                    "queue": name,
                    "held_gpus": sample.held_gpus[k],
                    "deserved_gpus": round(sample.deserved_gpus[k], 6),
                    "guarantee_gpus": guarantee[name],
                    "has_demand": sample.backlogged[k],
                }
            )
    return rows


def write_quota_shares(
    out_dir: Path, rows: Sequence[Mapping[str, object]], title: str
) -> list[Path]:
    """queues.csv (every row) and queues.png (each leaf's GPUs as a step line, its
    guarantee dashed in the same colour)."""
    csv_path = out_dir / "queues.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row[c] for c in COLUMNS])
    series: dict[str, tuple[list[float], list[float], float]] = {}
    for row in rows:
        name = str(row["queue"])
        t, held, _ = series.setdefault(name, ([], [], float(str(row["guarantee_gpus"]))))
        t.append(float(str(row["t_s"])))
        held.append(float(str(row["held_gpus"])))
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.add_subplot()
    span_s = max((t[-1] for t, _, _ in series.values() if t), default=0.0)
    unit, per_unit = ("h", 3600.0) if span_s > 3 * 3600 else ("min", 60.0)
    for k, (name, (t, held, guarantee)) in enumerate(series.items()):
        color = f"C{k % 10}"
        ax.step([x / per_unit for x in t], held, where="post", color=color, label=name)
        ax.axhline(guarantee, color=color, linestyle="--", linewidth=1.0)
    if series:
        ax.legend(loc="upper right")
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("GPUs held (dashed: guarantee)")
    ax.set_title(f"GPUs per quota: {title}")
    ax.grid(True, alpha=0.3)
    png_path = out_dir / "queues.png"
    fig.savefig(png_path, dpi=DPI, format="png")
    return [csv_path, png_path]


# What `replay --json` adds to its object when the replay had queues.
HEADLINE_KEYS = ("queues", "queue_fairness_jain")


def attach_report(result: ReplayResult, ledger: QuotaLedger, end_s: float) -> None:
    """Put the queues' report (`HEADLINE_KEYS`), `queue_ftf_rho` (each leaf's mean and
    largest Themis rho) and `queue_shares` (the rows) in the result's params, where
    the CLI and controller.report.write_replay find them."""
    result.params.update(ledger.report(result.jobs, end_s))
    result.params["queue_ftf_rho"] = ledger.ftf_rho(finish_time_fairness(result))
    result.params["queue_shares"] = share_rows(ledger)


def headline_fields(params: Mapping[str, object]) -> dict[str, object]:
    """The `HEADLINE_KEYS` present in a replay's params."""
    return {key: params[key] for key in HEADLINE_KEYS if key in params}
