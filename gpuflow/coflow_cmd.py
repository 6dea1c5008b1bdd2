"""`gpuflow coflow TRACE --policy NAME [--json]`: replay a coflow benchmark trace.

Registered by `gpuflow.cli` through `add_parser`; the work is done by
`experiments.coflow.replay`. A malformed trace raises `CoflowTraceError`
("{path}:{line}: field '{field}': {message}"), which the CLI prints as one line
with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from controller.network.allocators import ALLOCATORS
from experiments.coflow.replay import REALLOCATE, CoflowReplayResult, ReplayConfig, replay
from experiments.coflow.trace import CoflowTraceError, read_trace
from gpuflow import options

__all__ = ["CoflowTraceError", "add_parser", "run", "summary"]

BINS = ("SN", "LN", "SW", "LW")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `coflow` command on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "coflow",
        help="replay a coflow benchmark trace (coflowsim's model) under a network policy",
        description=(
            "Event-driven replay of a Facebook coflow benchmark trace: 1 Gbit/s rack "
            "ports, coflows admitted in 10.24 s epochs, CCT counted from the epoch start."
        ),
    )
    parser.add_argument("trace", help="trace file (<ports> <coflows> header)")
    parser.add_argument("--policy", choices=sorted(ALLOCATORS), default="sebf")
    parser.add_argument(
        "--port-gbps",
        type=options.positive_float,
        default=1.0,
        help="rack port speed (Gbit/s, > 0)",
    )
    parser.add_argument(
        "--reallocate",
        choices=REALLOCATE,
        default="coflowsim",
        help=(
            "when rates are recomputed: coflowsim (as the reference simulator: at every "
            "flow completion for fair, at coflow arrivals and departures for the coflow "
            "policies), flow (at every flow completion, work-conserving; slow on the "
            "full FB trace for coflow policies), coflow (at coflow arrivals and "
            "departures for every policy)"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler: replay and print; returns the exit code. Raises CoflowTraceError."""
    trace = read_trace(args.trace)
    config = ReplayConfig(port_gbps=args.port_gbps, reallocate=args.reallocate)
    result = replay(trace, args.policy, config)
    out = summary(result)
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_table(out))
    return 0


def summary(result: CoflowReplayResult) -> dict[str, Any]:
    """The `--json` object. `bins` holds each bin's average CCT in seconds (null
    when the bin is empty); short/long by longest flow < 5 MB, narrow/wide by <= 50
    flows."""
    return {
        "policy": result.policy,
        "coflows": len(result.outcomes),
        "avg_cct_s": result.avg_cct_s,
        "p95_cct_s": result.p95_cct_s,
        "wall_s": result.wall_s,
        "bins": result.bin_avg_cct_s(),
    }


def _table(out: dict[str, Any]) -> str:
    rows = [
        f"policy     {out['policy']}",
        f"coflows    {out['coflows']}",
        f"avg CCT    {out['avg_cct_s']:.3f} s",
        f"p95 CCT    {out['p95_cct_s']:.3f} s",
    ]
    for name in BINS:
        value = out["bins"][name]
        rows.append(f"  {name} avg  " + ("-" if value is None else f"{value:.3f} s"))
    rows.append(f"wall       {out['wall_s']:.1f} s")
    return "\n".join(rows) + "\n"
