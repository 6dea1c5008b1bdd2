"""`gpuflow placement PODS --nodes NODES --placer NAME[,NAME…] [--inflate 1.3]
[--seeds N] [--json] [--out DIR]`: FGD's placement experiment on an openb trace.

Registered by `gpuflow.cli` through `add_parser`; the work is done by
`experiments.packing.experiment` (tasks drawn with replacement until their GPU
requests reach --inflate x the cluster's GPU capacity, arriving one by one, never
leaving; seeds 42, 43, …). Output per placer: the share of GPU capacity allocated at
every 10 points of arrived workload, averaged over the seeds. A malformed file
raises `TraceError`, printed by the CLI as one line with exit code 2; an unknown
placer or a bad number is argparse's one-line usage error (exit 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from experiments.packing.experiment import ExperimentResult, run_experiment
from experiments.packing.openb import load_openb_node_resources, load_openb_tasks
from experiments.packing.registry import PACKERS
from gpuflow import options

__all__ = ["add_parser", "run", "summary"]

# More seeds than this is a typo: the authors ran 10, each run takes seconds to a minute.
MAX_SEEDS = 1000
# Ten times the cluster's capacity already fails nearly every task that arrives.
MAX_INFLATE = 10.0


def placer_names(text: str) -> list[str]:
    """An argparse type: comma-separated names of `PACKERS`, each once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PACKERS]
    if not names or unknown:
        shown = repr(unknown[0][:40]) if unknown else "none"
        known = ", ".join(sorted(PACKERS))
        raise argparse.ArgumentTypeError(f"unknown placer {shown} (known: {known})")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError("a placer is named twice")
    return names


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `placement` command on an argparse subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "placement",
        help="FGD's placement experiment: GPU allocation as an openb workload arrives",
        description=(
            "Tasks drawn with replacement from PODS until their GPU requests reach "
            "--inflate times the GPU capacity of NODES arrive one by one and never leave; "
            "reports the share of GPU capacity allocated (Weng et al., ATC 2023, §6)."
        ),
    )
    parser.add_argument("pods", help="openb pod list (openb_pod_list_*.csv)")
    parser.add_argument("--nodes", required=True, help="openb node list (openb_node_list_*.csv)")
    parser.add_argument(
        "--placer",
        type=placer_names,
        required=True,
        help=f"one or more of {', '.join(PACKERS)}, comma-separated",
    )
    parser.add_argument(
        "--inflate",
        type=options.bounded_float(0.0, MAX_INFLATE, inclusive=False),
        default=1.3,
        help="arrived GPU requests as a multiple of the GPU capacity (default 1.3)",
    )
    parser.add_argument(
        "--seeds",
        type=options.bounded_int(1, MAX_SEEDS),
        default=10,
        help="runs, with seeds 42, 43, ... (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per placer")
    parser.add_argument("--out", help="directory for placement.csv and placement.png")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler: run the experiment for each placer and print; returns the exit code."""
    nodes = load_openb_node_resources(args.nodes)
    tasks = load_openb_tasks(args.pods)
    results = [
        run_experiment(nodes, tasks, name, seeds=args.seeds, inflate=args.inflate)
        for name in args.placer
    ]
    for result in results:
        out = summary(result)
        sys.stdout.write(json.dumps(out) + "\n" if args.json else _table(out))
    if args.out:
        write_outputs(Path(args.out), results)
    return 0


def summary(result: ExperimentResult) -> dict[str, Any]:
    """The `--json` object: means over the seeds; `alloc_pct` keyed by arrived
    workload in percent of GPU capacity, `fragmentation_pct` FGD's F(M) at the end
    in percent of GPU capacity, `wall_s` the seconds of all runs."""
    alloc = result.mean_alloc_pct()
    frag = result.mean_fragmentation_pct()
    return {
        "placer": result.placer,
        "seeds": list(result.seeds),
        "gpu_capacity": result.gpu_capacity,
        "alloc_pct": {str(mark): round(value, 4) for mark, value in alloc.items()},
        "failed_tasks": result.failed_tasks,
        "fragmentation_pct": round(frag[result.checkpoints[-1]], 4),
        "wall_s": round(result.wall_s, 3),
    }


def write_outputs(out_dir: Path, results: list[ExperimentResult]) -> None:
    """placement.csv (placer, arrived %, allocated %, fragmentation %, means over the
    seeds) and placement.png (both against arrived workload, one line per placer)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "placement.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["placer", "arrived_pct", "alloc_pct", "fragmentation_pct"])
        for result in results:
            frag = result.mean_fragmentation_pct()
            for mark, alloc in result.mean_alloc_pct().items():
                writer.writerow([result.placer, mark, f"{alloc:.4f}", f"{frag[mark]:.4f}"])
    _plot(results).savefig(out_dir / "placement.png", dpi=120)


def _plot(results: list[ExperimentResult]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    alloc_ax, frag_ax = fig.subplots(1, 2)
    for result in results:
        marks = list(result.checkpoints)
        alloc_ax.plot(
            marks, list(result.mean_alloc_pct().values()), marker="o", label=result.placer
        )
        frag_ax.plot(
            marks, list(result.mean_fragmentation_pct().values()), marker="o", label=result.placer
        )
    alloc_ax.set(xlabel="arrived workload (% of GPU capacity)", ylabel="GPUs allocated (%)")
    frag_ax.set(xlabel="arrived workload (% of GPU capacity)", ylabel="fragmented GPUs (%)")
    alloc_ax.legend()
    alloc_ax.grid(alpha=0.3)
    frag_ax.grid(alpha=0.3)
    return fig


def _table(out: dict[str, Any]) -> str:
    rows = [
        f"placer          {out['placer']}  ({len(out['seeds'])} seeds, {out['gpu_capacity']} GPUs)"
    ]
    rows.append("arrived %       " + " ".join(f"{k:>6}" for k in out["alloc_pct"]))
    rows.append("allocated %     " + " ".join(f"{v:6.2f}" for v in out["alloc_pct"].values()))
    rows.append(f"failed tasks    {out['failed_tasks']:.1f}")
    rows.append(f"fragmented %    {out['fragmentation_pct']:.2f}")
    rows.append(f"wall            {out['wall_s']:.1f} s")
    return "\n".join(rows) + "\n"
