"""openb replayed with its pods' own GPU utilisation and with the catalogue's (issue 27
item 4): what the trace's figure changes in packing and slowdowns.

The openb loader gives a pod sharing a GPU its `gpu_milli` share as its utilisation
(`JobSpec.gpu_util`, controller/traces/formats/alibaba.py); the same replay with that figure
removed rates every pod by the catalogue's generic model (0.8, openb names no
models). Both run on openb's own node list (MPS, the default sharing mode) with the
fragmentation-aware placer, which sizes a share by max(memory share, utilisation).
Prints one row per policy and utilisation: mean and p99 JCT, makespan, CPU seconds.

    .venv/bin/python bench/openb_utilisation.py [--jobs N] [--policies fifo,gandiva]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from controller.metrics import summarize
from controller.model import JobSpec
from controller.placement import make_placer
from controller.sim import Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.registry import make_policy

DATA = Path("/work/shared/data/openb")


def replay(nodes: Path, jobs: list[JobSpec], policy: str) -> dict[str, float | None]:
    cluster = load_cluster(str(nodes))
    start = time.process_time()
    result = Simulator(
        cluster, jobs, make_policy(policy), make_placer("fragmentation-aware", cluster)
    ).run()
    summary = summarize(result)
    return {
        "avg_jct_s": summary.avg_jct_s,
        "p99_jct_s": summary.p99_jct_s,
        "makespan_s": summary.makespan_s,
        "cpu_s": time.process_time() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=DATA / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=DATA / "openb_node_list_gpu_node.csv")
    parser.add_argument("--jobs", type=int, default=0, help="the first N by submission (0: all)")
    parser.add_argument("--policies", default="fifo,gandiva")
    args = parser.parse_args()
    jobs = sorted(load_trace(args.pods).jobs, key=lambda j: (j.submit_s, j.job_id))
    if args.jobs:
        jobs = jobs[: args.jobs]
    own = sum(j.gpu_util is not None for j in jobs)
    print(f"{len(jobs)} jobs, {own} with the trace's utilisation (GPU shares)")
    variants = {"trace": jobs, "catalogue": [replace(j, gpu_util=None) for j in jobs]}
    header = f"{'policy':<8} {'utilisation':<11} {'avg JCT s':>10} {'p99 JCT s':>11} "
    print(header + f"{'makespan s':>11} {'CPU s':>6}")
    for policy in args.policies.split(","):
        for label, variant in variants.items():
            row = replay(args.nodes, variant, policy)
            cells = [_cell(row[k], w) for k, w in (("avg_jct_s", 10), ("p99_jct_s", 11))]
            cells.append(_cell(row["makespan_s"], 11))
            print(f"{policy:<8} {label:<11} {' '.join(cells)} {row['cpu_s'] or 0.0:>6.1f}")


def _cell(value: float | None, width: int) -> str:
    return f"{'-' if value is None else f'{value:,.0f}':>{width}}"


if __name__ == "__main__":
    main()
