"""Waiting in tests for something that happens in other threads or processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str, check: Callable[[], T], timeout_s: float = 60.0, every_s: float = 0.05
) -> T:
    """Call `check` every `every_s` until it returns something true, and return that;
    AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)
