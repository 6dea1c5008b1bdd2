"""What the operator's per-round metrics cost (operators.metrics.OperatorMetrics
.observe_round) at 1,000 nodes x 8 GPUs: 4,000 running jobs of 1 or 2 GPUs (5 GPUs of
each node held, every 50th node cordoned) and a queue of waiting jobs across 20
tenants, with one round's record naming a reclaim.

    PYTHONPATH=. .venv/bin/python bench/round_metrics.py [--nodes 1000] [--waiting 5000]

Prints one JSON object: the least, median and most milliseconds of `observe_round` over
`--rounds` calls, which the operator pays once per round on top of the round itself
(docs/benchmarks.md, "The scheduling metrics' cost per round").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.snapshots import job_view
from controller.decisions import Displacement, RoundRecord
from controller.model import Action, Allocation, JobSpec, JobStatus, Plan, Reason, Snapshot
from controller.placement import ConsolidatedPlacer
from operators.metrics import OperatorMetrics
from tests.builders import make_cluster

TENANTS = 20


def _spec(i: int, gpus: int) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_s=0.0, num_gpus=gpus, model="resnet50",
                   iterations=1000.0, tenant=f"t{i % TENANTS}")  # fmt: skip


def scenario(nodes: int, waiting: int) -> tuple[Snapshot, Plan, RoundRecord]:
    cluster = make_cluster(nodes=nodes, gpus=8, racks=max(1, nodes // 32))
    jobs, run = [], {}
    for i in range(nodes * 4):  # a node: 3 jobs of 1 GPU (GPUs 0-2), one of 2 (GPUs 4-5)
        node, k = divmod(i, 4)
        gpus, first = (2, 4) if k == 3 else (1, k)
        alloc = Allocation.whole([(node, g) for g in range(first, first + gpus)])
        jobs.append(job_view(_spec(i, gpus), JobStatus.RUNNING, alloc, 1000.0, 0.5))
        run[f"j{i}"] = alloc
    base = len(jobs)
    for i in range(base, base + waiting):
        view = job_view(_spec(i, 8), JobStatus.QUEUED, None, 1000.0, 0.0)
        jobs.append(view)
    snapshot = Snapshot(1000.0, cluster, tuple(jobs), ConsolidatedPlacer(cluster),
                        cordoned_nodes=frozenset(range(0, nodes, 50)))  # fmt: skip
    reclaim = Reason("PreemptedForReclaim", "guarantee")
    plan = Plan(run=run, default_reason=Reason("InsufficientGpus", "no 8 GPUs free"))
    moved = Displacement("j0", Action.PREEMPT, (f"j{base}",), reclaim, 1000.0)
    record = RoundRecord(1000.0, {}, {"j0": moved})
    return snapshot, plan, record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--waiting", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    snapshot, plan, record = scenario(args.nodes, args.waiting)
    metrics = OperatorMetrics()
    took = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        metrics.observe_round(0.01, snapshot, plan, record)
        took.append((time.perf_counter() - started) * 1000)
    out = {
        "nodes": args.nodes,
        "gpus": snapshot.cluster.num_gpus,
        "running": len(plan.run),
        "waiting": args.waiting,
        "tenants": TENANTS,
        "rounds": args.rounds,
        "observe_round_ms_min": round(min(took), 2),
        "observe_round_ms_median": round(statistics.median(took), 2),
        "observe_round_ms_max": round(max(took), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
