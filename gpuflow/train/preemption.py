"""SIGTERM as a request to stop at the next step boundary, checkpointed.

The kubelet sends SIGTERM when the scheduler preempts or resizes a job, then SIGKILL
after the DLJob's `checkpoint.gracePeriodSeconds`. The handler only sets a flag (no
I/O in a signal handler); `driver.Session` sees it at the next step boundary, saves
a checkpoint and exits with EXIT_CHECKPOINTED, which the operator reads as
"preempted, checkpointed" rather than a failure.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# What signal.signal returns and accepts (typeshed's private _HANDLER).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

# operators/pods/failure_policy.py EXIT_CHECKPOINTED: 75 is EX_TEMPFAIL of BSD's sysexits.h.
# Not imported (a job's process has no business loading the operator);
# tests/train/test_preemption.py checks the two agree.
EXIT_CHECKPOINTED = 75


class StopFlag:
    """Set by SIGTERM (or by `request()`); read at step boundaries."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: _Handler = None
        self._installed = False

    def install(self) -> None:
        """Handle SIGTERM in this (main) thread's process; `uninstall` restores."""
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            # None means the previous handler was not installed from Python.
            signal.signal(
                signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous
            )
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()

    def request(self) -> None:
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()
