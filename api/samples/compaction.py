"""Bounded storage for the samples: old samples merged into coarser bins, the oldest
dropped.

Called by api.samples.sampler every `coarse_s` of the backend's clock. Samples younger
than `full_s` are kept as taken (one row per sampling period); older ones are merged,
for each bin of `coarse_s` wholly older than that, into one row per node, tenant and
for the cluster, standing for the bin (`step_s` = `coarse_s`, `t_s` its start): the
time-weighted mean of each figure over the samples in the bin, except the worst wait
(its largest), a GPU's ECC count (largest) and health (unhealthy if at any sample),
as api.samples.rows.GPU_FIELDS says. A tenant has a row only in the samples where it
had a job: its means are over the time the cluster was sampled in the bin, the
samples without its row counting zero. Rows older than `retention_s` are deleted.

So the tables hold at most full_s / sample_s + retention_s / coarse_s samples of each
node, whatever the uptime: with the defaults (30 s, 1 h, 5 min, 7 days) 120 + 2,016
rows a node; bench/history_storage.py measures rows and bytes at 1,000 nodes.
CHUNK_BINS bins are merged in one transaction (read, delete, insert), so a crash leaves
either the samples or their merge, and a service back after a long stop catches up
in bounded memory.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from api.samples.rows import GPU_FIELDS
from api.store.models import Base, ClusterSample, NodeSample, TenantSample

# Bins merged per transaction: 12 bins of 5 min at 1,000 nodes read 120,000 node rows
# (an hour of samples) and write 12,000.
CHUNK_BINS = 12


@dataclass(frozen=True)
class Table:
    """A samples table: its key beside t_s, and how each figure merges over a bin."""

    model: type[Base]
    key: str | None
    mean: tuple[str, ...]
    largest: tuple[str, ...] = ()
    last: tuple[str, ...] = ()
    gpus: bool = False  # NodeSample's per-GPU lists
    # A sample without a row of a key means zero (a tenant with no job then has no row):
    # its means are over the span the cluster was sampled in the bin, not its rows'.
    sparse: bool = False


# Tenants first: their merge reads the cluster's samples of the bin, merged after.
TABLES = (
    Table(
        TenantSample,
        "tenant",
        mean=("gpus", "running", "waiting"),
        largest=("wait_max_s",),
        sparse=True,
    ),
    Table(NodeSample, "node", mean=("gpus_allocated", "util", "mem_used_mib"), gpus=True),
    Table(
        ClusterSample,
        None,
        mean=(
            "gpus_allocated",
            "util",
            "mem_used_mib",
            "mem_total_mib",
            "gpus_unhealthy",
            "running",
            "waiting",
            "wait_mean_s",
        ),
        largest=("wait_max_s",),
        last=("gpus",),
    ),
)


@dataclass(frozen=True)
class Compacted:
    merged: int  # rows merged into coarser ones
    written: int  # coarse rows written
    dropped: int  # rows older than the retention, deleted


def compact(
    session: Session, now_s: float, full_s: float, coarse_s: float, retention_s: float
) -> Compacted:
    """Merge the samples older than `full_s` into bins of `coarse_s` and drop those
    older than `retention_s`; commits as it goes."""
    cutoff = math.floor((now_s - full_s) / coarse_s) * coarse_s
    merged = written = 0
    for table in TABLES:
        model: Any = table.model
        fine = (model.step_s < coarse_s, model.t_s < cutoff)
        first = session.scalar(select(func.min(model.t_s)).where(*fine))
        if first is None:
            continue
        start = math.floor(first / coarse_s) * coarse_s
        while start < cutoff:
            stop = min(cutoff, start + CHUNK_BINS * coarse_s)
            chunk = (model.step_s < coarse_s, model.t_s >= start, model.t_s < stop)
            rows = session.execute(select(model.__table__).where(*chunk)).mappings().all()
            sampled = _sampled(session, start, stop, coarse_s) if table.sparse else None
            out = merge_rows(table, rows, coarse_s, sampled)
            session.execute(delete(model).where(*chunk))
            if out:
                session.execute(insert(model), out)
            session.commit()
            merged += len(rows)
            written += len(out)
            start = stop
    dropped = 0
    for table in TABLES:
        model = table.model
        gone = session.execute(delete(model).where(model.t_s < now_s - retention_s))
        dropped += int(getattr(gone, "rowcount", 0) or 0)
    session.commit()
    return Compacted(merged, written, dropped)


def _sampled(session: Session, start: float, stop: float, coarse_s: float) -> dict[float, float]:
    """Each bin's span the cluster was sampled in (its samples' step_s summed)."""
    rows = session.execute(
        select(ClusterSample.t_s, ClusterSample.step_s).where(
            ClusterSample.step_s < coarse_s, ClusterSample.t_s >= start, ClusterSample.t_s < stop
        )
    )
    out: dict[float, float] = defaultdict(float)
    for t_s, step_s in rows:
        out[math.floor(t_s / coarse_s) * coarse_s] += step_s
    return out


def merge_rows(
    table: Table, rows: Sequence[Any], coarse_s: float, sampled: dict[float, float] | None = None
) -> list[dict[str, Any]]:
    """One row per (bin, key) of `rows`, each figure merged as `table` says; a sparse
    table's means over `sampled`, each bin's sampled span (absent rows count zero)."""
    groups: dict[tuple[float, Any], list[Any]] = defaultdict(list)
    for row in rows:
        start = math.floor(row["t_s"] / coarse_s) * coarse_s
        groups[(start, row[table.key] if table.key else None)].append(row)
    out = []
    for (start, key), group in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        group.sort(key=lambda r: r["t_s"])
        weights = [float(r["step_s"]) for r in group]
        merged: dict[str, Any] = {"t_s": start, "step_s": coarse_s}
        if table.key:
            merged[table.key] = key
        span = None if sampled is None else sampled.get(start)
        for name in table.mean:
            merged[name] = _mean([r[name] for r in group], weights, span)
        for name in table.largest:
            values = [r[name] for r in group if r[name] is not None]
            merged[name] = max(values) if values else None
        for name in table.last:
            merged[name] = group[-1][name]
        if table.gpus:
            merged["gpus"] = merge_gpus([r["gpus"] for r in group], weights)
        out.append(merged)
    return out


def merge_gpus(docs: Sequence[dict[str, Any]], weights: Sequence[float]) -> dict[str, Any]:
    """Per-GPU lists merged element by element (a GPU count that changed within the
    bin takes the last sample's)."""
    n = len(docs[-1].get("util") or [])
    out: dict[str, Any] = {}
    for name, how in GPU_FIELDS.items():
        column: list[int | None] = []
        for i in range(n):
            pairs = [
                (doc[name][i], w)
                for doc, w in zip(docs, weights, strict=True)
                if len(doc.get(name) or []) > i and doc[name][i] is not None
            ]
            if not pairs:
                column.append(None)
            elif how == "max":
                column.append(max(v for v, _ in pairs))
            elif how == "min":
                column.append(min(v for v, _ in pairs))
            else:
                column.append(round(sum(v * w for v, w in pairs) / sum(w for _, w in pairs)))
        out[name] = column
    totals = [int(d["mem_total"]) for d in docs if d.get("mem_total") is not None]
    out["mem_total"] = max(totals) if totals else None
    return out


def _mean(
    values: Sequence[float | None], weights: Sequence[float], span: float | None = None
) -> float | None:
    """Time-weighted mean of the values known (None: none known), over `span` if given
    (the time not covered by a value counts as zero)."""
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    if not pairs:
        return None
    covered = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / max(covered, span or 0.0)
