"""The batch size a policy sets on a running job, and what adopting it means.

The operator writes the global batch into the pod annotation `gpuflow.dev/batch-size`
(`operators/crd.py` ANN_BATCH_SIZE); the kubelet renders the pod's annotations into
the downward-API file `$GPUFLOW_PODINFO_DIR/annotations`, one `key="value"` line per
annotation with the value quoted as Go's %q (strconv.Quote). `BatchWatcher` re-reads
that file when its mtime changes, at most every `min_interval_s`. Only rank 0 reads:
the kubelets of different pods refresh their files at different moments, so ranks
reading their own files could disagree for a step; `driver.Session` broadcasts rank
0's value in its per-step all-reduce instead.

The learning-rate rule is the square-root rule: lr(B) = lr(B0) * sqrt(B / B0)
(Krizhevsky, "One weird trick for parallelizing convolutional neural networks", 2014,
§5; Hoffer et al., "Train longer, generalize better", NeurIPS 2017, §4). AdaptDL's
AdaScale gain would use the gradient statistics as well; the square-root rule needs
nothing but the two sizes and is what we state to jobs.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# operators/crd.py ANN_BATCH_SIZE (not imported: a job talks to the cluster only
# through its env and this file). tests/train/test_batch.py checks they agree.
ANN_BATCH_SIZE = "gpuflow.dev/batch-size"
# The kubelet refreshes downward-API volumes about once a minute (its sync period);
# a stat per second costs nothing and adopts a change within a second of it landing.
MIN_INTERVAL_S = 1.0

_LINE = re.compile(r'^([^=]+)="(.*)"$')
_ESCAPE = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|[abfnrtv\\"\'])')
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unescape(match: re.Match[str]) -> str:
    esc = match.group(1)
    if esc[0] in "xuU":
        return chr(int(esc[1:], 16))
    if esc[0].isdigit():
        return chr(int(esc, 8))
    return _SIMPLE.get(esc, esc)


def parse_annotations(text: str) -> dict[str, str]:
    """The downward-API rendering of metadata.annotations as a dict. Lines that are
    not `key="value"` are skipped (the file is the kubelet's, not ours to reject)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = _ESCAPE.sub(_unescape, m.group(2))
    return out


def batch_from_annotations(annotations: dict[str, str]) -> int | None:
    raw = annotations.get(ANN_BATCH_SIZE)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        log.warning("annotation %s=%r is not an integer; ignored", ANN_BATCH_SIZE, raw)
        return None
    return value if value >= 1 else None


@dataclass(frozen=True)
class Split:
    """A global batch divided over `replicas`: every replica takes `local` samples
    (DDP averages replicas with equal weight, so unequal shares would bias the
    gradient); the global batch in use is local * replicas, which can round the
    requested size down to a multiple of the replicas (never below one per replica)."""

    local: int
    replicas: int

    @property
    def global_batch(self) -> int:
        return self.local * self.replicas


def split_batch(global_batch: int, replicas: int) -> Split:
    if global_batch < 1 or replicas < 1:
        raise ValueError(f"batch {global_batch} over {replicas} replicas")
    return Split(local=max(1, global_batch // replicas), replicas=replicas)


def scaled_lr(base_lr: float, base_batch: int, batch: int) -> float:
    """The square-root rule (module docstring)."""
    return base_lr * math.sqrt(batch / base_batch)


class BatchWatcher:
    """Rank 0's view of the annotations file: `poll()` returns the batch size it
    carries when the file changed since the last read, else None."""

    def __init__(self, path: Path | None, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._path = path
        self._min_interval_s = min_interval_s
        self._next_check = 0.0
        self._mtime_ns: int | None = None

    def poll(self, now: float | None = None) -> int | None:
        if self._path is None:
            return None
        now = time.monotonic() if now is None else now
        if now < self._next_check:
            return None
        self._next_check = now + self._min_interval_s
        try:
            mtime = os.stat(self._path).st_mtime_ns
            if mtime == self._mtime_ns:
                return None
            text = self._path.read_text(encoding="utf-8")
        except OSError:
            return None  # no podinfo volume (a job run outside gpuflow)
        self._mtime_ns = mtime
        return batch_from_annotations(parse_annotations(text))
