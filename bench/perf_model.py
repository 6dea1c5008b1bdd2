"""Performance-model call cost: `iteration_time_s` on a two-node GPT-2 placement.

    .venv/bin/python bench/perf_model.py

The simulator calls the model (behind RateModel's cache) at every start, resize and
re-share; this prints the per-call time of the model itself, uncached by the caller.
"""

from __future__ import annotations

import time

from controller.model import Allocation
from controller.model.catalog import resolve
from controller.model.perf import iteration_time_s
from controller.spec import load_cluster


def main() -> None:
    cluster = load_cluster("4x8")
    alloc = Allocation.whole([(0, g) for g in range(4)] + [(2, g) for g in range(4)])
    profile = resolve("gpt2")
    iteration_time_s(profile, cluster, alloc)  # warm the ring-bandwidth cache
    calls = 20_000
    start = time.perf_counter()
    for _ in range(calls):
        iteration_time_s(profile, cluster, alloc, gpu_load=0.1)
    per_call_us = (time.perf_counter() - start) / calls * 1e6
    print(f"iteration_time_s: {per_call_us:.1f} us per call ({calls} calls)")


if __name__ == "__main__":
    main()
