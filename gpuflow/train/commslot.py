"""When a job may communicate: the time-shift a network policy gives a running job.

CASSINI (Rajasekaran et al., NSDI 2024, §4) interleaves jobs that share a link by
shifting each job's iterations in time, so that one job's communication phase falls
into the others' compute phases. The operator publishes the shift as two pod
annotations, `gpuflow.dev/comm-period-s` (the length of the shared schedule's cycle)
and `gpuflow.dev/comm-offset-s` (this job's slot in it), through the channel that
carries the batch size (batch.py: the downward-API annotations file). A job whose
gradient all-reduce is ready waits until the next instant t with
(t - offset) mod period = 0 on the wall clock, the clock every node shares through
NTP, and communicates then.

Deviations from CASSINI: the paper shifts a job once (it pauses the job for the
shift) and lets iterations run free, re-shifting on drift; here every iteration is
held to its slot, which keeps the shift without watching for drift, and costs a job
whose iteration is longer than the period up to one period per iteration (the policy
sets the period to the longest iteration of the jobs it interleaves). A job that is
late by less than GRACE_FRACTION of a period goes at once instead of waiting a whole
period for the next slot; a job communicates at most once per slot, so a job whose
iteration is shorter than the period iterates once per period.

Used by driver.Session (the all-reduce hook of distributed.py waits at a `SlotGate`
before the first gradient bucket of a step) and by gpuflow.netexp's synthetic jobs.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuflow.train.batch import MIN_INTERVAL_S, parse_annotations

log = logging.getLogger(__name__)

# operators/crd.py ANN_COMM_PERIOD_S and ANN_COMM_OFFSET_S (not imported: a job talks
# to the cluster only through its env and the annotations file).
ANN_COMM_PERIOD_S = "gpuflow.dev/comm-period-s"
ANN_COMM_OFFSET_S = "gpuflow.dev/comm-offset-s"
# Late by at most this fraction of the period, a job communicates at once: a slot of
# two interleaved jobs has half a period to itself, and a tenth of it late still ends
# well before the next job's slot begins, where waiting would cost a whole period.
GRACE_FRACTION = 0.1


@dataclass(frozen=True)
class CommSlot:
    """A cycle of `period_s` on the wall clock whose slot for this job opens at
    offset_s (mod period_s)."""

    period_s: float
    offset_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ValueError(f"comm period_s must be positive, got {self.period_s}")
        if not math.isfinite(self.offset_s):
            raise ValueError(f"comm offset_s must be finite, got {self.offset_s}")

    def delay_s(self, now_s: float, last_slot: int | None = None) -> tuple[float, int]:
        """(seconds to wait, index of the slot to communicate in) for a job ready at
        wall time `now_s` that last communicated in slot `last_slot`: none within the
        grace after its slot opened, unless it used that slot already; otherwise until
        the slot opens next. Slot k opens at offset_s + k * period_s."""
        index = math.floor((now_s - self.offset_s) / self.period_s)
        into = now_s - self.offset_s - index * self.period_s
        if into <= GRACE_FRACTION * self.period_s and index != last_slot:
            return 0.0, index
        return max(0.0, self.period_s - into), index + 1


class SlotGate:
    """Holds a job's communication to its slots, one communication per slot; the
    slot may change between steps (`slot = None`: no waiting)."""

    def __init__(self, slot: CommSlot | None = None, clock: Callable[[], float] = time.time):
        self.slot = slot
        self._clock = clock
        self._last: int | None = None

    def wait(self) -> float:
        """Sleep until the job may communicate; returns the seconds slept."""
        if self.slot is None:
            return 0.0
        delay, self._last = self.slot.delay_s(self._clock(), self._last)
        if delay > 0:
            time.sleep(delay)
        return delay


def slot_from_annotations(annotations: dict[str, str]) -> CommSlot | None:
    """The slot the annotations carry, or None when they carry none or a bad one
    (logged: the file is the kubelet's rendering of what the operator wrote)."""
    period = annotations.get(ANN_COMM_PERIOD_S)
    if period is None:
        return None
    try:
        return CommSlot(float(period), float(annotations.get(ANN_COMM_OFFSET_S, "0")))
    except ValueError as exc:
        log.warning("comm slot annotations ignored: %s", exc)
        return None


class SlotWatcher:
    """Rank 0's view of the annotations file for the comm slot: `poll()` returns
    (True, slot or None) when the file changed since the last read, (False, None)
    otherwise; re-reads at most every `min_interval_s`, as BatchWatcher does."""

    def __init__(self, path: Path | None, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self._path = path
        self._min_interval_s = min_interval_s
        self._next_check = 0.0
        self._mtime_ns: int | None = None
        self._slot: CommSlot | None = None

    def poll(self, now: float | None = None) -> tuple[bool, CommSlot | None]:
        if self._path is None:
            return False, None
        now = time.monotonic() if now is None else now
        if now < self._next_check:
            return False, None
        self._next_check = now + self._min_interval_s
        try:
            mtime = os.stat(self._path).st_mtime_ns
            if mtime == self._mtime_ns:
                return False, None
            text = self._path.read_text(encoding="utf-8")
        except OSError:
            return False, None  # no podinfo volume (a job run outside gpuflow)
        self._mtime_ns = mtime
        slot = slot_from_annotations(parse_annotations(text))
        if slot == self._slot:
            return False, None
        self._slot = slot
        return True, slot
