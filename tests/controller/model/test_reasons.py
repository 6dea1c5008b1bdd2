"""The "does not fit" reason (controller.model.job.does_not_fit, short_of_gpus): each
policy's message, byte for byte as the policies wrote it before it was one function
(a replay's reasons must not change)."""

from __future__ import annotations

import pytest

from controller.model import Reason
from controller.model.job import FRAGMENTED, INSUFFICIENT_GPUS, does_not_fit, short_of_gpus


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        # FIFO (policies/fifo.py)
        (
            short_of_gpus(4, 6, " but no placement fits the gang"),
            Reason("Fragmented", "needs 4 GPUs; 6 are free but no placement fits the gang"),
        ),
        (
            short_of_gpus(4, 4, " but no placement fits the gang"),
            Reason("Fragmented", "needs 4 GPUs; 4 are free but no placement fits the gang"),
        ),
        (
            short_of_gpus(4, 3, " but no placement fits the gang"),
            Reason("InsufficientGpus", "needs 4 GPUs; 3 are free"),
        ),
        # Gandiva (policies/gandiva/__init__.py)
        (
            short_of_gpus(2, 2, " but scattered"),
            Reason("Fragmented", "needs 2 GPUs; 2 are free but scattered"),
        ),
        (
            short_of_gpus(2, 0, " but scattered"),
            Reason("InsufficientGpus", "needs 2 GPUs; 0 are free"),
        ),
        # Tiresias (policies/tiresias/placement.py)
        (
            does_not_fit(8, "5 are free, no placement fits", INSUFFICIENT_GPUS, where="Q1: "),
            Reason("InsufficientGpus", "Q1: needs 8 GPUs; 5 are free, no placement fits"),
        ),
        (
            does_not_fit(8, "9 are free, no placement fits", FRAGMENTED, where="Q0: "),
            Reason("Fragmented", "Q0: needs 8 GPUs; 9 are free, no placement fits"),
        ),
        # Pollux, Optimus, Gavel, EDF
        (does_not_fit(16, "12 are up"), Reason("InsufficientGpus", "needs 16 GPUs; 12 are up")),
        (
            does_not_fit(4, "earlier jobs hold the no others"),
            Reason("InsufficientGpus", "needs 4 GPUs; earlier jobs hold the no others"),
        ),
        (
            does_not_fit(32, "no GPU type has that many", "NoGpuTypeFits"),
            Reason("NoGpuTypeFits", "needs 32 GPUs; no GPU type has that many"),
        ),
        (
            does_not_fit(
                2, "it is due at 900 s, and jobs due earlier hold the cluster", "QueuedBehind"
            ),
            Reason(
                "QueuedBehind",
                "needs 2 GPUs; it is due at 900 s, and jobs due earlier hold the cluster",
            ),
        ),
    ],
)
def test_each_policy_s_message_is_unchanged(reason: Reason, expected: Reason) -> None:
    assert reason == expected
