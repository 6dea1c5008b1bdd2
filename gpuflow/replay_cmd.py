"""`gpuflow replay`, `compare` and `demo`: replay a trace under one policy, under
several side by side, or the embedded-defaults run (a seeded synthetic trace on 16x4
GPUs under every registered policy, plots in out/demo: README's main command).

Registered by `gpuflow.cli` through `add_parsers`; `run_replay` (also used by
bench/replay.py) loads the trace, cluster, placer, failures and queue tree, replays
in `controller.sim` and summarises with `controller.metrics`. Bad input raises the
loaders' one-line errors or `CliError`, printed by the CLI with exit code 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuflow import options
from gpuflow.options import CliError, option_values, policy_options, regular_file

__all__ = ["ReplayArgs", "add_parsers", "run_replay"]

# Parallel replays at most: each is a process of its own.
MAX_WORKERS = options.bounded_int(0, 256)


@dataclass(frozen=True)
class ReplayArgs:
    trace: str
    fmt: str | None
    cluster: str
    policy: str
    placement: str
    interval_s: float
    seed: int
    failures: str | None
    max_time_s: float | None
    # (key, value) options for the policy; the value "trace" for a `*_samples_gpu_s`
    # option means "the service (GPUs x duration) of the trace's own jobs".
    policy_options: tuple[tuple[str, str], ...] = ()
    # How multi-node jobs share NICs and rack uplinks (controller.network.registry).
    network: str = "dedicated"
    # How shared links slow jobs: steady rates or phases (controller.network.registry).
    network_model: str = "steady"
    # A queue tree's YAML file (controller.quotas.spec): quotas around the policy.
    queues: str | None = None
    # A throughput matrix in Gavel's JSON format (controller.model.perf.matrix).
    throughputs: str | None = None
    # When rounds run: on the interval's grid or at events (controller.sim.events.Clock).
    round_anchor: str = "grid"
    # ElasticFlow's per-event overhead on every running job (SimConfig.event_overhead).
    event_overhead: bool = False


def add_parsers(sub: Any) -> None:
    """Register `replay`, `compare` and `demo` on an argparse subparsers object."""
    replay = sub.add_parser("replay", help="replay a trace under one policy")
    _replay_options(replay)
    replay.add_argument("--policy", "-p", required=True)
    replay.set_defaults(func=_cmd_replay)

    compare = sub.add_parser("compare", help="replay a trace under several policies")
    _replay_options(compare)
    compare.add_argument("--policies", required=True, help="comma-separated, e.g. fifo,srtf")
    compare.add_argument(
        "--jobs", "-j", type=MAX_WORKERS, default=0, help="parallel replays (0: cores)"
    )
    compare.set_defaults(func=_cmd_compare)

    demo = sub.add_parser("demo", help="generate a trace, compare the policies, write plots")
    demo.add_argument("--out", default="out/demo")
    demo.add_argument("--json", action="store_true")
    demo.set_defaults(func=_cmd_demo)


def round_interval(text: str) -> float:
    """--interval: 0 or a number in the simulator's range (controller.sim.config)."""
    from controller.sim.config import MAX_ROUND_INTERVAL_S, MIN_ROUND_INTERVAL_S

    value = options.bounded_float(0.0, MAX_ROUND_INTERVAL_S)(text)
    if 0 < value < MIN_ROUND_INTERVAL_S:
        wanted = f"0 or >= {MIN_ROUND_INTERVAL_S:g}"
        raise argparse.ArgumentTypeError(f"must be {wanted}, not {text[:20]}")
    return value


def _replay_options(p: argparse.ArgumentParser) -> None:
    from controller.network.registry import network_help

    p.add_argument("trace")
    p.add_argument("--cluster", "-c", required=True, help="YAML file, preset or NODESxGPUS")
    p.add_argument("--format", "-f", dest="fmt", help="trace format (default: detect)")
    p.add_argument("--out", "-o", help="directory for JSON, CSV and plots")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--placement", default="consolidated")
    p.add_argument(
        "--interval",
        type=round_interval,
        default=60.0,
        help="seconds between rounds: 0 (at every change) or 0.001..1e6",
    )
    p.add_argument(
        "--round-anchor",
        # controller.sim.config.ROUND_ANCHORS, named here so that building the parser
        # does not import the simulator (round_interval imports it only when used).
        choices=("grid", "event"),
        default="grid",
        help="rounds at multiples of --interval (grid) or at a change, at least "
        "--interval after the last (event: ElasticFlow's simulator's slots)",
    )
    p.add_argument(
        "--event-overhead",
        action="store_true",
        help="charge every running job ElasticFlow's simulator's overhead after every "
        "round, resized or not (else a job pays only for its restarts)",
    )
    p.add_argument("--seed", type=options.non_negative_int, default=0)
    p.add_argument("--failures", help="CSV time_s,node,event (down|up)")
    p.add_argument(
        "--max-time", type=options.positive_float, dest="max_time", help="stop the clock here (s)"
    )
    p.add_argument(
        "--policy-opt",
        action="append",
        default=[],
        metavar="[POLICY:]KEY=VALUE",
        help="a policy option (JSON value or string), e.g. tiresias:starve_limit=2 or "
        "tiresias:service_samples_gpu_s=trace; repeatable",
    )
    p.add_argument(
        "--network",
        default="dedicated",
        help=network_help(),
    )
    p.add_argument(
        "--network-model",
        default="steady",
        help="how shared links slow jobs: steady (one rate per job) or phases (compute "
        "phases and all-reduce bursts; docs/network.md)",
    )
    p.add_argument("--queues", help="YAML quota tree: quotas and fair sharing (docs/quotas.md)")
    p.add_argument(
        "--throughputs",
        help="each job type's steps/s per GPU type and count, in Gavel's JSON format "
        "(simulation_throughputs.json); default: the performance model",
    )


def _replay_args(args: argparse.Namespace, policy: str) -> ReplayArgs:
    regular_file("--cluster", args.cluster)
    regular_file("--failures", args.failures)
    regular_file("--queues", args.queues)
    if args.queues:
        from controller.quotas.spec import load_quotas

        load_quotas(args.queues)  # a bad file fails before any replay starts
    regular_file("--throughputs", args.throughputs)
    if args.throughputs:
        from controller.model.perf.matrix import MatrixError, load_matrix

        try:
            load_matrix(args.throughputs)  # a bad file fails before any replay starts
        except MatrixError as exc:
            raise CliError(f"--throughputs {exc}") from None
    from controller.network.registry import NetworkError, check

    try:
        check(args.network, args.network_model)
    except NetworkError as exc:
        raise CliError(str(exc)) from None
    return ReplayArgs(
        trace=args.trace,
        fmt=args.fmt,
        cluster=args.cluster,
        policy=policy,
        placement=args.placement,
        interval_s=args.interval,
        seed=args.seed,
        failures=args.failures,
        max_time_s=args.max_time,
        policy_options=policy_options(args.policy_opt, policy),
        network=args.network,
        network_model=args.network_model,
        queues=args.queues,
        throughputs=args.throughputs,
        round_anchor=args.round_anchor,
        event_overhead=args.event_overhead,
    )


def _option_values(options: tuple[tuple[str, str], ...], jobs: Sequence[Any]) -> dict[str, Any]:
    """The options' values; `KEY_samples_gpu_s=trace` takes the trace's own job sizes."""
    values: dict[str, Any] = {}
    rest = []
    for key, raw in options:
        if raw == "trace" and key.endswith("_samples_gpu_s"):
            values[key] = tuple(j.duration_s * j.num_gpus for j in jobs if j.duration_s is not None)
        else:
            rest.append((key, raw))
    return {**values, **option_values(tuple(rest))}


def run_replay(ra: ReplayArgs, progress: Callable[[int, int], None] | None = None) -> Any:
    """Load, replay and summarise; returns (ReplayResult, Summary)."""
    from controller.failures import load_failures
    from controller.metrics import summarize
    from controller.model.gpu_choice.gpu_type import FastestTypePlacer
    from controller.model.perf.matrix import load_matrix
    from controller.network.registry import wrap_placer
    from controller.placement import make_placer
    from controller.rates import RateModel
    from controller.sim import SimConfig, Simulator
    from controller.spec import load_cluster
    from controller.traces import load_trace
    from policies.registry import make_policy

    trace = load_trace(ra.trace, ra.fmt)
    policy = make_policy(ra.policy, **_option_values(ra.policy_options, trace.jobs))
    cluster = load_cluster(ra.cluster)
    # The network's placer wrapper (CASSINI's placement under cassini) around the placer.
    placer = wrap_placer(make_placer(ra.placement, cluster, ra.seed), cluster, ra.network)
    failures = load_failures(ra.failures, cluster) if ra.failures else ()
    queues = None
    if ra.queues:
        from controller.quotas.spec import load_quotas

        queues = load_quotas(ra.queues)
    config = SimConfig(
        round_interval_s=ra.interval_s,
        round_anchor=ra.round_anchor,
        event_overhead=ra.event_overhead,
        seed=ra.seed,
        failures=failures,
        max_time_s=ra.max_time_s,
        network=ra.network,
        network_model=ra.network_model,
        queues=queues,
    )
    matrix = load_matrix(ra.throughputs) if ra.throughputs else None
    rates = RateModel(cluster, matrix)
    if matrix is not None:
        # With a matrix, the policies that place through the placer choose the type.
        placer = FastestTypePlacer(placer, cluster, rates)
    sim = Simulator(cluster, trace.jobs, policy, placer, config, trace_name=trace.name, rates=rates)
    del trace  # the simulator lets each job's spec go once the job has left
    with _fewer_collections():
        result = sim.run(progress)
    if sim.controller.quotas is not None and sim.controller.quotas.ledger is not None:
        from controller.quotas.report import attach_report

        attach_report(result, sim.controller.quotas.ledger, sim.now_s)
    return result, summarize(result)


# Allocations between the garbage collector's youngest-generation passes during a
# replay (CPython's default: 700). A replay allocates views, allocations and
# events by the million and keeps few of them; at the default, collections took 6 %
# of a Tiresias replay's CPU (the first 20,000 stand-in jobs on 32x8,
# docs/benchmarks.md "Fourth pass"), and 1.4 % at this threshold. Reference counting
# still frees what is not cyclic at once.
REPLAY_GC_THRESHOLD = 50_000


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """The garbage collector's youngest generation at `REPLAY_GC_THRESHOLD` while
    the replay runs; its thresholds as they were afterwards."""
    thresholds = gc.get_threshold()
    gc.set_threshold(REPLAY_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def _progress_bar(label: str) -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "bar" not in bar:
            bar["bar"] = tqdm(total=total, desc=label, unit="job", file=sys.stderr, leave=False)
        b = bar["bar"]
        b.update(done - b.n)
        if done >= total:
            b.close()

    return update


def _cmd_replay(args: argparse.Namespace) -> int:
    from controller.metrics import deadline_fields, headline
    from controller.report import write_replay

    ra = _replay_args(args, args.policy)
    result, summary = run_replay(ra, _progress_bar(ra.policy))
    if args.out:
        write_replay(Path(args.out), result, summary)
    head = {**headline(summary, result.policy, result.wall_s), **deadline_fields(result)}
    from controller.quotas.report import headline_fields

    queues = headline_fields(result.params)
    if args.json:
        print(json.dumps({**head, **queues}))
    else:
        _print_table([head])
        if queues:
            print(json.dumps(queues))
        if args.out:
            print(f"wrote {args.out}/summary.json, jobs.csv, timeline.csv and plots")
    return 0


def _replay_worker(ra: ReplayArgs) -> Any:
    return run_replay(ra)


def _cmd_compare(args: argparse.Namespace) -> int:
    from policies.registry import make_policy

    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    if not names:
        raise CliError("--policies: give at least one policy name")
    for name in names:
        make_policy(name)  # fail fast on an unknown name (options are checked per run)
    runs = [_replay_args(args, name) for name in names]
    _compare(runs, out=Path(args.out) if args.out else None, as_json=args.json, workers=args.jobs)
    return 0


def _compare(runs: list[ReplayArgs], *, out: Path | None, as_json: bool, workers: int) -> None:
    """Replay each run (in parallel processes, `workers` of them, 0: one per core),
    print the headlines and write what `out` asks for."""
    from controller.metrics import deadline_fields, headline
    from controller.quotas.report import headline_fields
    from controller.report import write_comparison, write_replay

    workers = workers if workers > 0 else min(len(runs), _cores())
    if workers > 1 and len(runs) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            pairs = list(pool.map(_replay_worker, runs))
    else:
        pairs = [run_replay(ra, _progress_bar(ra.policy)) for ra in runs]
    heads = [{**headline(s, r.policy, r.wall_s), **deadline_fields(r)} for r, s in pairs]
    if as_json:  # with --queues, each object has the queue keys `replay --json` adds
        heads = [{**h, **headline_fields(r.params)} for h, (r, _) in zip(heads, pairs, strict=True)]
    if out is not None:
        for result, summary in pairs:
            write_replay(out / result.policy, result, summary)
        write_comparison(out, pairs)
    if as_json:
        print(json.dumps(heads))
    else:
        _print_table(heads)


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _cmd_demo(args: argparse.Namespace) -> int:
    """The embedded-defaults run: a seeded synthetic trace, every policy, plots."""
    from controller.traces import write_canonical
    from controller.traces.formats.synthetic import generate
    from policies.registry import policy_names

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / "trace.csv"
    write_canonical(trace_path, generate(400, seed=1, cluster_gpus=64, load=1.2))
    runs = [
        ReplayArgs(
            trace=str(trace_path),
            fmt="gpuflow",
            cluster="16x4",
            policy=name,
            placement="consolidated",
            interval_s=60.0,
            seed=0,
            failures=None,
            max_time_s=None,
        )
        for name in policy_names()
    ]
    _compare(runs, out=out, as_json=args.json, workers=0)
    if not args.json:
        print(f"wrote {out}/compare.json, compare_jct_cdf.png, compare_bars.png")
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    cols = ["policy", "jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilization", "wall_s"]
    print("  ".join(f"{c:>15}" for c in cols))
    for row in rows:
        cells = []
        for c in cols:
            v = row.get(c)
            cells.append(f"{v:>15.3f}" if isinstance(v, float) else f"{v!s:>15}")
        print("  ".join(cells))
