"""A window of samples as series on regular bins, for api.routes.history.

Each stored row stands for the span [t_s, t_s + step_s) (a sample its sampling period,
a merged row its bin: api.samples.compaction). A bin of the answer holds, for a mean
figure, the mean of the rows overlapping it weighted by the overlap, as
api.quotas.series bins the queues' GPUs (so a figure's area under the curve is the
same whatever the step), and for a worst figure (the longest wait) the largest; a bin
no row overlaps is null (not sampled then: the service was down, or the window
reaches before the retention).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

# As api.replays.series: two points a pixel column of a ~1,000-pixel-wide chart.
MAX_POINTS = 2000
# The default step: the window in this many bins (or the sampling period if longer).
DEFAULT_POINTS = 240


class WindowError(ValueError):
    """A window or step the caller must change: the query field, and why."""

    def __init__(self, field: str, message: str, value: object) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


@dataclass(frozen=True)
class Window:
    from_s: float
    to_s: float
    step_s: float

    @property
    def points(self) -> int:
        return max(1, math.ceil((self.to_s - self.from_s) / self.step_s - 1e-9))

    def starts(self) -> list[float]:
        return [self.from_s + k * self.step_s for k in range(self.points)]


def window_of(
    now_s: float,
    sample_s: float,
    from_s: float | None,
    to_s: float | None,
    last_s: float | None,
    step_s: float | None,
) -> Window:
    """The window asked: `from_s`..`to_s` (to_s defaults to now), or the `last_s`
    seconds to now (an hour when neither is given); its step `step_s`, by default the
    window in DEFAULT_POINTS bins but no finer than the sampling period. The first bin
    starts at the multiple of the step at or before the window's start."""
    if last_s is not None and from_s is not None:
        raise WindowError("last_s", "give last_s or from_s, not both", last_s)
    end = now_s if to_s is None else to_s
    start = from_s if from_s is not None else end - (3600.0 if last_s is None else last_s)
    if end <= start:
        raise WindowError("to_s", f"to_s must be after the window's start ({start:g})", end)
    span = end - start
    step = max(sample_s, span / DEFAULT_POINTS) if step_s is None else step_s
    if span / step > MAX_POINTS - 1:  # one more bin for the start's alignment
        least = span / (MAX_POINTS - 1)
        raise WindowError(
            "step_s", f"at most {MAX_POINTS} points: step_s >= {least:g} for this window", step
        )
    # Bins on multiples of the step, so that a chart polled again keeps its bins.
    return Window(math.floor(start / step) * step, end, step)


def binned(
    window: Window,
    rows: Iterable[tuple[float, float, float | None]],
    worst: bool = False,
    sampled: Sequence[float] | None = None,
) -> list[float | None]:
    """(t_s, step_s, value) rows on the window's bins: the overlap-weighted mean of the
    values known, or with `worst` the largest; None where no known value overlaps.
    `sampled`, each bin's time covered by samples (`sampled_span`), makes a bin's mean
    over that time, a sample without a row counting zero (a tenant with no job then
    has no row); a bin sampled but without a row is then 0."""
    n = window.points
    sums = [0.0] * n
    weights = [0.0] * n
    top: list[float | None] = [None] * n
    for t_s, step_s, value in rows:
        if value is None:
            continue
        for b, overlap in _overlaps(window, t_s, step_s):
            sums[b] += value * overlap
            weights[b] += overlap
            current = top[b]
            top[b] = value if current is None else max(current, value)
    if worst:
        return top
    if sampled is not None:
        return [
            total / max(w, span) if max(w, span) > 0 else None
            for total, w, span in zip(sums, weights, sampled, strict=True)
        ]
    return [s / w if w > 0 else None for s, w in zip(sums, weights, strict=True)]


def binned_columns(
    window: Window, rows: Iterable[tuple[float, float, Sequence[float | None]]], columns: int
) -> list[list[float | None]]:
    """`binned` means of several columns at once: each (t_s, step_s, values) row's
    overlaps are found once for all its `columns` values (the nodes' series, 3 columns
    of 1,000 nodes over a day, cost a third of the time column by column)."""
    n = window.points
    sums = [[0.0] * n for _ in range(columns)]
    weights = [[0.0] * n for _ in range(columns)]
    for t_s, step_s, values in rows:
        for b, overlap in _overlaps(window, t_s, step_s):
            for c, value in enumerate(values):
                if value is not None:
                    sums[c][b] += value * overlap
                    weights[c][b] += overlap
    return [
        [s / w if w > 0 else None for s, w in zip(sums[c], weights[c], strict=True)]
        for c in range(columns)
    ]


def sampled_span(window: Window, rows: Iterable[tuple[float, float]]) -> list[float]:
    """Each bin's time covered by the (t_s, step_s) rows of the cluster's samples."""
    spans = [0.0] * window.points
    for t_s, step_s in rows:
        for b, overlap in _overlaps(window, t_s, step_s):
            spans[b] += overlap
    return spans


def _overlaps(window: Window, t_s: float, step_s: float) -> Iterator[tuple[int, float]]:
    """The bins the span [t_s, t_s + step_s) meets, each with the time it overlaps."""
    lo, hi = max(t_s, window.from_s), min(t_s + step_s, window.to_s)
    if hi <= lo:
        return
    first = int((lo - window.from_s) // window.step_s)
    last = min(window.points - 1, int((hi - window.from_s) // window.step_s))
    for b in range(first, last + 1):
        b_lo = window.from_s + b * window.step_s
        overlap = min(hi, b_lo + window.step_s) - max(lo, b_lo)
        if overlap > 0:
            yield b, overlap


def rounded(values: Sequence[float | None], digits: int = 3) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]
