"""Gavel's space sharing: the packed policies against the unpacked ones on Gavel's trace.

    .venv/bin/python bench/gavel_packing.py [--data DIR] [--policies gavel-las,...] [--json]

Replays `minimize_makespan.trace` (100 jobs, all at 0) on
examples/clusters/gavel-8-16-24.yaml (8 V100, 16 P100, 24 K80 in servers of 4) with
Gavel's throughput matrix (`--throughputs`, simulation_throughputs.json: its single
and pair entries) and 360 s rounds, each of gavel-fifo, gavel-las, gavel-ftf and
gavel-makespan aware, as it is (Gavel's `*_perf`) and with `packed=true` (Gavel's
`*_packed`: X over jobs and pairs, a chosen pair run on shared GPUs at its pair rates),
restarts free as in Gavel's simulator (`SimConfig.restart_s = 0`), as bench/gavel.py
replays them. Prints each run's average JCT and makespan in hours, the packed one's
change against the unpacked, the share of job-rounds a job ran paired, and wall time.
The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.model import Plan, Policy, Snapshot
from controller.model.perf.matrix import load_matrix
from controller.placement import make_placer
from controller.rates import RateModel
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.registry import make_policy

DATA = Path("/work/shared/data/gavel")
CLUSTER = Path(__file__).resolve().parent.parent / "examples/clusters/gavel-8-16-24.yaml"
ROUND_S = 360.0
POLICIES = ("gavel-fifo", "gavel-las", "gavel-ftf", "gavel-makespan")


@dataclass
class Counting:
    """The policy, counting at each new round the jobs it runs and those it runs on
    GPUs shared with another (a round is a plan with a new state)."""

    policy: Policy
    job_rounds: int = 0
    paired: int = 0

    @property
    def name(self) -> str:
        return self.policy.name

    def schedule(self, snapshot: Snapshot, state: Any) -> Plan:
        plan = self.policy.schedule(snapshot, state)
        if plan.state is not state:
            self.job_rounds += len(plan.run)
            self.paired += sum(a.shared for a in plan.run.values())
        return plan


def replay(data: Path, policy: str, packed: bool) -> dict[str, float]:
    """One replay's average JCT and makespan (hours), paired job-rounds and wall time."""
    trace = load_trace(str(data / "minimize_makespan.trace"), "gavel")
    cluster = load_cluster(str(CLUSTER))
    rates = RateModel(cluster, load_matrix(data / "simulation_throughputs.json"))
    counting = Counting(make_policy(policy, packed=packed))
    sim = Simulator(
        cluster,
        trace.jobs,
        counting,
        make_placer("consolidated", cluster, 0),
        SimConfig(round_interval_s=ROUND_S, restart_s=0.0),
        rates=rates,
    )
    start = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - start
    finish = [j.finish_s for j in result.jobs]
    done = [f - j.submit_s for f, j in zip(finish, result.jobs, strict=True) if f is not None]
    if len(done) != len(result.jobs):
        raise RuntimeError(f"{policy} packed={packed}: {len(result.jobs) - len(done)} unfinished")
    return {
        "avg_jct_h": sum(done) / len(done) / 3600,
        "makespan_h": max(f for f in finish if f is not None) / 3600,
        "paired_share": counting.paired / max(1, counting.job_rounds),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for policy in args.policies.split(","):
        alone = replay(args.data, policy, False)
        packed = replay(args.data, policy, True)
        rows.append(
            {
                "policy": policy,
                "unpacked": alone,
                "packed": packed,
                "jct_change": packed["avg_jct_h"] / alone["avg_jct_h"] - 1.0,
                "makespan_change": packed["makespan_h"] / alone["makespan_h"] - 1.0,
            }
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        return 0
    print(
        f"{'policy':16} {'JCT h':>6} {'packed':>6} {'change':>7}  {'makespan h':>10} "
        f"{'packed':>6} {'change':>7}  {'paired':>6}  {'wall s':>6} {'packed':>6}"
    )
    for r in rows:
        a, p = r["unpacked"], r["packed"]
        print(
            f"{r['policy']:16} {a['avg_jct_h']:6.2f} {p['avg_jct_h']:6.2f} "
            f"{r['jct_change']:+7.1%}  {a['makespan_h']:10.2f} {p['makespan_h']:6.2f} "
            f"{r['makespan_change']:+7.1%}  {p['paired_share']:6.1%}  "
            f"{a['wall_s']:6.1f} {p['wall_s']:6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
