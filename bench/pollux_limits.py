"""Pollux's search with and without the GPU-choice filter's limits (node masks, quota
bounds: policies/pollux/limits.py): GPUs the filter refuses per round, and time.

    PYTHONPATH=. .venv/bin/python bench/pollux_limits.py [--seeds 5]

bench/pollux.py's 100-job round (the Pollux testbed, 16 nodes x 4 T4, half the jobs
running) under four scenarios: `plain` (nothing to refuse: the search unchanged),
`models` (nodes 8-15 of V100s, a third of the jobs accepting one model only; running
jobs on a model they refuse are waiting), `cordon` (nodes 0-3 cordoned) and `quotas`
(tenants a, b, c in turn; a limited to 12 GPUs, b guaranteed 24 limited to 32, c
guaranteed 16; admitted by controller.quotas.admission first, as the controller
does). Each seed is one cold round and one warm round a minute later (state carried),
with `limits=False` (the search blind to them, as before) and `limits=True`, after
one untimed pass that fills the goodput tables' caches.

Per scenario and variant, summed over the rounds: `planned` (GPUs the search's best
individual gives out), `refused` (of those, the GPUs the filter did not grant:
`policies.pollux.place.filtered` leaves a refused job what it held, or nothing),
`granted` (GPUs in the plans), `waiting_refused` (jobs left waiting with a filter
reason), and the schedule's mean wall and CPU seconds a round.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import policies.pollux as pollux_module
from controller.model import Allocation, JobView, Reason, Snapshot
from controller.model.cluster import Cluster
from controller.model.gpus import GPU_CATALOG
from controller.model.job import JobStatus
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.quotas.admission import Quotas
from policies.pollux import Pollux

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.pollux import round_snapshot

SCENARIOS = ("plain", "models", "cordon", "quotas")
TREE = QuotaTree(
    (
        QuotaNode("a", limit=GpuQuota.of(12)),
        QuotaNode("b", guarantee=GpuQuota.of(24), limit=GpuQuota.of(32)),
        QuotaNode("c", guarantee=GpuQuota.of(16)),
    )
)


def scenario(name: str, seed: int) -> tuple[Snapshot, QuotaTree | None]:
    """The 100-job snapshot of `seed` under scenario `name` (module docstring)."""
    snapshot = round_snapshot(100, seed)
    if name == "models":
        v100 = GPU_CATALOG.find("V100-SXM2-16GB").gpu_type()
        old = snapshot.cluster
        nodes = tuple(replace(n, gpu_type=v100) if i >= 8 else n for i, n in enumerate(old.nodes))
        cluster = Cluster(f"{old.name}-v100", nodes, old.racks, old.groups)
        views = [_one_model(v, i, cluster) for i, v in enumerate(snapshot.jobs)]
        return Snapshot(snapshot.now_s, cluster, tuple(views), snapshot.placer), None
    if name == "cordon":
        return replace(snapshot, cordoned_nodes=frozenset(range(4))), None
    if name == "quotas":
        tenants = ("a", "b", "c")
        views = [
            replace(v, spec=replace(v.spec, tenant=tenants[i % 3]))
            for i, v in enumerate(snapshot.jobs)
        ]
        return replace(snapshot, jobs=tuple(views)), TREE
    return snapshot, None


def _one_model(view: JobView, index: int, cluster: Cluster) -> JobView:
    """Every third job accepts one GPU model (T4 or V100 in turn); one running on a
    model it refuses waits instead."""
    if index % 3:
        return view
    model = cluster.nodes[0 if index % 2 else 8].gpu_type.name
    spec = replace(view.spec, gpu_models=frozenset({model}))
    alloc = view.allocation
    if alloc is not None and any(cluster.nodes[n].gpu_type.name != model for n in alloc.nodes):
        return replace(view, spec=spec, allocation=None, status=JobStatus.PREEMPTED)
    return replace(view, spec=spec)


class Counter:
    """Wraps `policies.pollux.filtered` to count what the search planned and the
    filter granted."""

    def __init__(self) -> None:
        self.planned = self.granted = self.waiting = 0
        self.inner = pollux_module.filtered

    def __call__(
        self, snapshot: Snapshot, views: list[JobView], placed: list[Allocation | None]
    ) -> list[Allocation | Reason | None]:
        out = self.inner(snapshot, views, placed)
        self.planned += sum(a.num_gpus for a in placed if a is not None)
        self.granted += sum(a.num_gpus for a in out if isinstance(a, Allocation))
        self.waiting += sum(1 for a in out if isinstance(a, Reason))
        return out


def run(name: str, limits: bool, seeds: int) -> dict[str, Any]:
    counter = Counter()
    pollux_module.filtered = counter  # type: ignore[assignment]
    wall = cpu = 0.0
    rounds = 0
    try:
        for seed in range(seeds):
            snapshot, tree = scenario(name, seed)
            policy = Pollux(seed=seed, limits=limits)
            state: object = None
            for step in range(2):  # cold, then warm a minute later
                shown = replace(snapshot, now_s=snapshot.now_s + 60.0 * step)
                if tree is not None:
                    order = policy.queue_order(shown, None)
                    shown = Quotas(tree).admit(shown, order).seen
                t0, c0 = time.perf_counter(), time.process_time()
                plan = policy.schedule(shown, state)
                wall += time.perf_counter() - t0
                cpu += time.process_time() - c0
                state = plan.state
                rounds += 1
    finally:
        pollux_module.filtered = counter.inner
    return {
        "scenario": name,
        "limits": limits,
        "rounds": rounds,
        "planned": counter.planned,
        "refused": counter.planned - counter.granted,
        "granted": counter.granted,
        "waiting_refused": counter.waiting,
        "wall_s_per_round": round(wall / rounds, 3),
        "cpu_s_per_round": round(cpu / rounds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    for name in args.scenarios.split(","):
        run(name, True, args.seeds)  # untimed: the goodput tables' caches filled
        for limits in (False, True):
            print(json.dumps(run(name, limits, args.seeds)), flush=True)


if __name__ == "__main__":
    main()
