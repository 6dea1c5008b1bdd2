"""The measured pairs of controller/model/profiles/h200-sharing/measurements.csv, as
the sharing model's tests (tests/controller/model/test_sharing.py) and `gpuflow
colocate`'s (tests/gpuflow/test_colocate.py) check them: each process of a pair with
its and its neighbour's utilisation alone (their `solo` rows) and its slowdown.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

from controller.model.sharing import SharingMode

MEASUREMENTS = resources.files("controller.model").joinpath(
    "profiles", "h200-sharing", "measurements.csv"
)


@dataclass(frozen=True)
class Pair:
    """One process of a measured pair: its mode, model, its and its neighbour's
    utilisation alone (0..1), their memory, and its measured slowdown."""

    mode: SharingMode
    model: str
    util: float
    beside_util: float
    mem_mib: int
    beside_mem_mib: int
    slowdown: float


def measured_pairs() -> list[Pair]:
    rows = list(csv.DictReader(MEASUREMENTS.read_text().splitlines()))
    solo = {(r["model"], r["batch"], r["precision"]): r for r in rows if r["kind"] == "solo"}
    pairs = []
    for r in rows:
        if r["kind"] != "pair":
            continue
        own = solo[(r["model"], r["batch"], r["precision"])]
        other = solo[(r["beside_model"], r["beside_batch"], r["precision"])]
        pairs.append(
            Pair(
                SharingMode(r["sharing"]),
                r["model"],
                float(own["gpu_util_pct"]) / 100,
                float(other["gpu_util_pct"]) / 100,
                int(own["peak_mem_mib"]),
                int(other["peak_mem_mib"]),
                float(own["iters_per_s"]) / float(r["iters_per_s"]),
            )
        )
    return pairs


PAIRS = measured_pairs()
