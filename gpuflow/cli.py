"""The `gpuflow` command line: replays, comparisons, traces, clusters, policies, packing.

This module holds the parser, the error handling every command shares, and the
`trace` and `cluster` commands; each other command lives in a `*_cmd` module that
registers itself (`replay_cmd`: replay, compare, demo).

Bad input (a malformed trace or cluster spec, an unknown policy or format) ends
with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuflow import options, replay_cmd
from gpuflow.options import CliError, regular_file
from gpuflow.replay_cmd import ReplayArgs, run_replay

__all__ = ["ReplayArgs", "main", "run_replay"]  # ReplayArgs, run_replay: bench/replay.py

EXIT_USAGE = 2
# The most jobs `trace generate` makes: ten times the 1M-row trace of
# docs/benchmarks.md, a few GB of memory while it is written.
GENERATED_JOBS = options.bounded_int(1, 10_000_000)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        # JSON or YAML nested deeper than the parsers recurse (a cluster spec, a trace).
        print("gpuflow: error: input nested too deeply", file=sys.stderr)
        return EXIT_USAGE
    except _input_errors() as exc:
        # Each names the file, line and field (or lists the known names) itself.
        print(f"gpuflow: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE


def _input_errors() -> tuple[type[Exception], ...]:
    from controller.failures import FailureScheduleError
    from controller.model.quotas import QuotaSpecError
    from controller.network import UnknownNetworkPolicyError
    from controller.placement import UnknownPlacerError
    from controller.spec import ClusterSpecError
    from controller.traces import TraceError
    from experiments.coflow.trace import CoflowTraceError
    from policies.registry import UnknownPolicyError

    return (
        CliError,
        TraceError,
        ClusterSpecError,
        UnknownPolicyError,
        UnknownPlacerError,
        FailureScheduleError,
        CoflowTraceError,
        UnknownNetworkPolicyError,
        QuotaSpecError,
        OSError,
    )


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuflow", description=__doc__)
    p.add_argument("--version", action="version", version=f"gpuflow {_version()}")
    sub = p.add_subparsers(metavar="COMMAND")

    replay_cmd.add_parsers(sub)

    trace = sub.add_parser("trace", help="generate or validate traces").add_subparsers(
        metavar="ACTION"
    )
    gen = trace.add_parser("generate", help="a synthetic Philly-like trace (canonical CSV)")
    gen.add_argument("--jobs", "-n", type=GENERATED_JOBS, default=1000)
    gen.add_argument("--seed", type=options.non_negative_int, default=0)
    gen.add_argument("--cluster", "-c", default="16x4", help="sizes the arrival rate")
    gen.add_argument(
        "--load", type=options.positive_float, default=0.9, help="offered load / cluster GPUs"
    )
    gen.add_argument("--arrival", choices=("poisson", "diurnal"), default="poisson")
    gen.add_argument("--output", "-o", required=True)
    gen.set_defaults(func=_cmd_trace_generate)
    val = trace.add_parser("validate", help="load a trace and report what it holds")
    val.add_argument("trace")
    val.add_argument("--format", "-f", dest="fmt")
    val.add_argument("--json", action="store_true")
    val.set_defaults(func=_cmd_trace_validate)

    cl = sub.add_parser("cluster", help="describe a cluster spec, preset or NODESxGPUS")
    cl.add_argument("cluster")
    cl.add_argument(
        "--json",
        action="store_true",
        help="the built cluster as JSON: node types (GPU model, memory, speed, links, "
        "sharing), racks, groups",
    )
    cl.set_defaults(func=_cmd_cluster)

    from gpuflow import (
        coflow_cmd,
        colocate_cmd,
        operator_cmd,
        placement_cmd,
        policies_cmd,
        quotas_cmd,
        sandbox_cmd,
        serve_cmd,
    )

    policies_cmd.add_parser(sub)
    colocate_cmd.add_parser(sub)
    coflow_cmd.add_parser(sub)
    placement_cmd.add_parser(sub)
    serve_cmd.add_parsers(sub)
    operator_cmd.add_parsers(sub)
    sandbox_cmd.add_parsers(sub)
    quotas_cmd.add_parser(sub)
    return p


def _version() -> str:
    """The installed package's version (its metadata, as pip shows it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuflow")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _cmd_trace_generate(args: argparse.Namespace) -> int:
    from controller.spec import load_cluster
    from controller.traces import write_canonical
    from controller.traces.formats.synthetic import generate

    regular_file("--cluster", args.cluster)
    cluster = load_cluster(args.cluster)
    jobs = generate(
        args.jobs,
        seed=args.seed,
        cluster_gpus=cluster.num_gpus,
        load=args.load,
        arrival=args.arrival,
    )
    write_canonical(Path(args.output), jobs)
    print(f"wrote {len(jobs)} jobs to {args.output}")
    return 0


def _cmd_trace_validate(args: argparse.Namespace) -> int:
    from controller.traces import load_trace

    trace = load_trace(args.trace, args.fmt)
    info = {
        "trace": trace.name,
        "format": trace.fmt,
        "jobs": len(trace.jobs),
        "skipped": trace.skipped,
        "gpus_max": max(j.num_gpus for j in trace.jobs),
        "span_s": trace.jobs[-1].submit_s - trace.jobs[0].submit_s,
    }
    if args.json:
        print(json.dumps(info))
    else:
        print(" ".join(f"{k}={v}" for k, v in info.items()))
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    from controller.spec import cluster_summary, describe, load_cluster

    regular_file("cluster", args.cluster)
    cluster = load_cluster(args.cluster)
    print(json.dumps(cluster_summary(cluster)) if args.json else describe(cluster))
    return 0


if __name__ == "__main__":
    sys.exit(main())
