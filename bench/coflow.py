"""Replay the Facebook coflow benchmark under each network policy.

    .venv/bin/python bench/coflow.py [--coflows N] [--policies sebf,aalo,fair]
        [--reallocate coflowsim|flow|coflow] [--reference]

Prints, per policy: coflows, avg and p95 CCT, average CCT per bin (SN/LN/SW/LW),
events and wall time. `--coflows N` replays the first N coflows only; `--reference`
runs the generic `FlowArrays` replay (the oracle the port-fabric fast path is
tested against) instead of the fast path; `--reallocate` picks when rates are
recomputed (default coflowsim's rule, see experiments/coflow/replay.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from experiments.coflow.replay import REALLOCATE, ReplayConfig, replay, replay_reference
from experiments.coflow.trace import read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "coflow" / "FB2010-1Hr-150-0.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--coflows", type=int, default=None)
    parser.add_argument("--policies", default="sebf,aalo,fair,sincronia")
    parser.add_argument("--reference", action="store_true", help="the slow generic path")
    parser.add_argument("--reallocate", choices=REALLOCATE, default="coflowsim")
    args = parser.parse_args()
    config = ReplayConfig(reallocate=args.reallocate)
    trace = read_trace(args.trace)
    if args.coflows is not None:
        trace = dataclasses.replace(trace, coflows=trace.coflows[: args.coflows])
    print(
        f"trace {args.trace}: {len(trace.coflows)} coflows, {trace.n_flows} flows, "
        f"reallocate={args.reallocate}"
    )
    print(
        f"{'policy':<12}{'avg CCT s':>11}{'p95 CCT s':>11}  bins avg CCT s (SN LN SW LW)"
        f"{'events':>10}{'wall s':>9}"
    )
    for policy in args.policies.split(","):
        result = (replay_reference if args.reference else replay)(trace, policy, config)
        bins = " ".join("-" if v is None else f"{v:.2f}" for v in result.bin_avg_cct_s().values())
        print(
            f"{policy:<12}{result.avg_cct_s:>11.3f}{result.p95_cct_s:>11.3f}  {bins:<28}"
            f"{result.events:>10}{result.wall_s:>9.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
