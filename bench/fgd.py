"""FGD's headline experiment (Weng et al., USENIX ATC 2023, Fig. 9 at 130 %): each of
FGD's placers on the default openb trace, 10 seeds, against the published means.

    .venv/bin/python bench/fgd.py [--pods PODS] [--nodes NODES] [--seeds 10]
        [--first-seed 42] [--inflate 1.3] [--placers random,best-fit,...]
        [--processes N] [--out DIR]

Prints a Markdown table (mean and range of the GPU allocation at the last checkpoint,
the published mean, the difference, failed tasks, FGD's fragmentation, seconds per
experiment = one seed) for docs/benchmarks.md and docs/placement.md, then each
placer's `gpuflow placement --json` object; with --out, also `gpuflow placement`'s
CSV and plot. --processes runs that many seeds (of any placer) at once, each seed's
seconds then measured beside the others'. --first-seed runs seeds other than the
authors' 42, 43, ... (a choice tuned on those can be checked on seeds it never saw).
"""

from __future__ import annotations

import argparse
import json
import platform
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from experiments.packing.experiment import FIRST_SEED, ExperimentResult, run_seed
from experiments.packing.fragmentation import TargetWorkload
from experiments.packing.openb import load_openb_node_resources, load_openb_tasks
from experiments.packing.registry import PACKERS
from gpuflow.placement_cmd import summary, write_outputs

OPENB = Path("/work/shared/data/openb")
# Published means over 10 seeds at 130 % arrived workload (the openb data README,
# from the paper's Fig. 9(a) and text).
PUBLISHED_PCT = {
    "fgd": 95.39,
    "best-fit": 93.08,
    "gpu-packing": 92.00,
    "gpu-clustering": 91.88,
    "dot-product": 90.85,
    "random": 87.47,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default=str(OPENB / "openb_pod_list_default.csv"))
    parser.add_argument("--nodes", default=str(OPENB / "openb_node_list_gpu_node.csv"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=FIRST_SEED)
    parser.add_argument("--inflate", type=float, default=1.3)
    parser.add_argument("--placers", default=",".join(PACKERS))
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    nodes = load_openb_node_resources(args.nodes)
    tasks = load_openb_tasks(args.pods)
    results = []
    print(
        f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print(
        "| placer | allocated % (mean) | min-max | published | diff | failed tasks "
        "| fragmented % | s / experiment |"
    )
    print("|---|---|---|---|---|---|---|---|")
    names = args.placers.split(",")
    target = TargetWorkload.from_tasks(tasks)
    gpus = sum(node.gpus for node in nodes)
    seeds = [args.first_seed + k for k in range(args.seeds)]
    with ProcessPoolExecutor(max_workers=max(1, args.processes)) as pool:
        futures = {
            name: [
                pool.submit(run_seed, nodes, tasks, name, seed, args.inflate, target)
                for seed in seeds
            ]
            for name in names
        }
        for name in names:
            runs = tuple(future.result() for future in futures[name])
            result = ExperimentResult(name, gpus, runs)
            results.append(result)
            last = result.checkpoints[-1]
            finals = [run.alloc_pct[last] for run in result.runs]
            mean = result.mean_alloc_pct()[last]
            published = PUBLISHED_PCT.get(name)
            diff = "" if published is None else f"{mean - published:+.2f}"
            print(
                f"| {name} | {mean:.2f} | {min(finals):.2f}-{max(finals):.2f} | "
                f"{published if published is not None else ''} | {diff} | "
                f"{result.failed_tasks:.0f} | {result.mean_fragmentation_pct()[last]:.2f} | "
                f"{result.wall_s / len(result.runs):.1f} |",
                flush=True,
            )
    for result in results:
        print(json.dumps(summary(result)))
    if args.out:
        write_outputs(Path(args.out), results)


if __name__ == "__main__":
    main()
