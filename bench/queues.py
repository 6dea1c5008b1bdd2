"""Queues benchmark: issue 18's Show replayed under each policy, with and without quotas.

    .venv/bin/python bench/queues.py [--policies fifo,tiresias,pollux] [--json]

Three teams guaranteed 64/38/26 GPUs (50/30/20 % of 16x8) under one organisation
queue (controller/quotas/show.py); team-a submits 120 jobs at 0 and borrows the
whole cluster; team-b and team-c submit 90 jobs each from the first hour on. Rounds
every 60 s; Pollux's jobs are elastic (half to twice their size). For each policy it
prints, over the intervals where every team has demand: each team's mean GPUs
against its guarantee, Jain's index of mean share over guarantee; then the time
from the others' first job until team-b and team-c each hold their guarantee (less
one gang: 3 GPUs), the reclaims, each team's average JCT, and the replay's wall and
CPU seconds. The same trace without queues shows what the quotas change.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from controller.model.quotas import QuotaTree
from controller.placement import make_placer
from controller.quotas.ledger import QuotaLedger
from controller.quotas.show import GPUS_PER_NODE, GUARANTEES, NODES, show_jobs, show_tree
from controller.records import ReplayResult
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from policies.registry import make_policy

OTHERS_AT_S = 3600.0
INTERVAL_S = 60.0
SLACK_GPUS = 3  # one gang of the scenario's largest size (4) less one


def replay(policy: str, tree: QuotaTree | None) -> tuple[ReplayResult, Simulator, float]:
    cluster = load_cluster(f"{NODES}x{GPUS_PER_NODE}")
    jobs = show_jobs(elastic=policy == "pollux", others_at_s=OTHERS_AT_S)
    config = SimConfig(round_interval_s=INTERVAL_S, queues=tree)
    sim = Simulator(
        cluster, jobs, make_policy(policy), make_placer("consolidated", cluster), config
    )
    cpu = time.process_time()
    result = sim.run()
    return result, sim, time.process_time() - cpu


def team_jct(result: ReplayResult) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for team in GUARANTEES:
        jcts = [o.jct_s for o in result.jobs if o.tenant == team and o.jct_s is not None]
        out[team] = sum(jcts) / len(jcts) if jcts else None
    return out


def reach_s(ledger: QuotaLedger) -> dict[str, float | None]:
    """Seconds from the others' first job until each of team-b and team-c holds its
    guarantee less `SLACK_GPUS`."""
    out: dict[str, float | None] = {}
    for team in ("team-b", "team-c"):
        k = ledger.leaves.index(team)
        hit = next(
            (
                s.t_s
                for s in ledger.samples
                if s.t_s >= OTHERS_AT_S and s.held_gpus[k] >= GUARANTEES[team] - SLACK_GPUS
            ),
            None,
        )
        out[team] = None if hit is None else hit - OTHERS_AT_S
    return out


def figures(policy: str) -> dict[str, object]:
    result, sim, cpu_s = replay(policy, show_tree())
    quotas = sim.controller.quotas
    assert quotas is not None and quotas.ledger is not None
    ledger = quotas.ledger
    end_s = sim.now_s
    report = ledger.report(result.jobs, end_s)
    means = ledger.mean_over_contended(end_s)
    base, _, base_cpu_s = replay(policy, None)
    return {
        "policy": policy,
        "contended_h": sum(d for _, d in ledger.contended(end_s)) / 3600.0,
        "mean_gpus": None if means is None else dict(zip(ledger.leaves, means[0], strict=True)),
        "jain": report["queue_fairness_jain"],
        "reach_s": reach_s(ledger),
        "reclaims": dict(ledger.reclaims),
        "avg_jct_s": team_jct(result),
        "avg_jct_s_without_queues": team_jct(base),
        "wall_s": result.wall_s,
        "cpu_s": cpu_s,
        "cpu_s_without_queues": base_cpu_s,
    }


def show(fig: dict[str, object]) -> None:
    out = sys.stdout.write
    out(f"\n{fig['policy']}: {fig['contended_h']:.1f} h with every team backlogged\n")
    mean = fig["mean_gpus"]
    assert isinstance(mean, dict)
    jct, base = fig["avg_jct_s"], fig["avg_jct_s_without_queues"]
    reach, reclaims = fig["reach_s"], fig["reclaims"]
    assert isinstance(jct, dict) and isinstance(base, dict)
    assert isinstance(reach, dict) and isinstance(reclaims, dict)
    for team, guarantee in GUARANTEES.items():
        held = mean[team]
        off = 100.0 * (held - guarantee) / guarantee
        got = reach.get(team)
        at = "" if team == "team-a" else f"  guarantee at +{got:.0f} s" if got is not None else ""
        out(
            f"  {team}: {held:6.2f} GPUs of {guarantee} ({off:+.1f} %)  reclaims "
            f"{reclaims[team]:3d}  avg JCT {jct[team] / 3600:5.2f} h "
            f"(no queues {base[team] / 3600:5.2f} h){at}\n"
        )
    out(
        f"  Jain {fig['jain']:.4f}; replay {fig['wall_s']:.1f} s wall, {fig['cpu_s']:.2f} "
        f"CPU-s (no queues {fig['cpu_s_without_queues']:.2f} CPU-s)\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="fifo,tiresias,pollux")
    parser.add_argument("--json", action="store_true", help="one JSON object per policy")
    args = parser.parse_args()
    for policy in args.policies.split(","):
        fig = figures(policy)
        if args.json:
            sys.stdout.write(json.dumps(fig) + "\n")
        else:
            show(fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
