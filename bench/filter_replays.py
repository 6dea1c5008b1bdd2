"""Replays whose outcome the GPU-choice filter could change (issue 29, item 4), as
fingerprints to compare between two trees.

    PYTHONPATH=TREE .venv/bin/python bench/filter_replays.py [--sets plain,cordon,quotas]

Every registered policy on three sets: `plain`, a synthetic 200-job trace (seed 7,
load 1.5) on 4x4, where nothing is refused; `cordon`, another (seed 8) with node-0
cordoned from 3,000 s to 20,000 s, without `check_plans` (a breach would be held
back, not raised); `quotas`, issue 18's Show with its quota tree
(controller/quotas/show.py). One JSON line a replay: the average JCT, a fingerprint
of every job's first start, finish and restarts, and the defects the check held back
(none before the filter existed). Run on the tree before and after a change to the
filter and compare the fingerprints (docs/benchmarks.md, "The GPU-choice filter").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from controller.failures import load_failures
from controller.metrics import summarize
from controller.placement import make_placer
from controller.quotas.show import show_jobs, show_tree
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces.formats.synthetic import generate
from policies.registry import make_policy, policy_names

# Pollux's search shortened as the invariant suite's replays shorten it.
OPTIONS: dict[str, dict[str, Any]] = {"pollux": {"generations": 20, "population": 40}}
CORDON = "time_s,node,event\n3000,node-0,cordon\n20000,node-0,uncordon\n"


def _simulator(kind: str, policy: str, folder: Path) -> Simulator:
    made = make_policy(policy, **OPTIONS.get(policy, {}))
    if kind == "quotas":
        cluster = load_cluster("16x8")
        jobs = tuple(show_jobs(elastic=policy in {"pollux", "optimus"}, others_at_s=3600.0))
        config = SimConfig(round_interval_s=60.0, queues=show_tree())
    else:
        cluster = load_cluster("4x4")
        jobs = tuple(generate(200, seed=7 if kind == "plain" else 8, cluster_gpus=16, load=1.5))
        config = SimConfig(round_interval_s=60.0)
        if kind == "cordon":
            schedule = folder / "nodes.csv"
            schedule.write_text(CORDON)
            config = SimConfig(round_interval_s=60.0, failures=load_failures(schedule, cluster))
    return Simulator(cluster, jobs, made, make_placer("consolidated", cluster), config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="plain,cordon,quotas")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.sets.split(","):
            for policy in policy_names():
                sim = _simulator(kind, policy, Path(folder))
                result = sim.run()
                jobs = sorted(
                    (o.job_id, o.first_start_s, o.finish_s, o.restarts) for o in result.jobs
                )
                defects = getattr(sim.controller, "defects", None)
                row = {
                    "set": kind,
                    "policy": policy,
                    "avg_jct_s": summarize(result).avg_jct_s,
                    "fingerprint": hashlib.sha256(repr(jobs).encode()).hexdigest()[:12],
                    "defects": None if defects is None else defects.total,
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
