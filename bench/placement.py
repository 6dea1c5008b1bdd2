"""Placement benchmark: each placer under FIFO on topology-rich clusters, plus latency.

    .venv/bin/python bench/placement.py [--jobs 4000] [--clusters dgx1-v100:32,16x4]
        [--load 0.9] [--interval 60] [--placers random,first-fit,...] [--latency-nodes 256]

For each cluster and placer: a synthetic Philly-like trace
(`controller.traces.formats.synthetic.generate`, seed 42) replayed by `controller.sim.Simulator`
with the FIFO policy; prints avg JCT, GPU allocation and utilisation
(`controller.metrics.summarize`), the replay's wall time, and the placer's calls and
mean time per call inside the replay. Then a latency test outside the simulator: on
`dgx1-v100:N` and `dgx-a100:N` kept about 90% allocated by random placements and
releases, the mean CPU time per `place` call by gang size. Results go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict

from controller.metrics import summarize
from controller.model import Allocation, Cluster, GpuPool, JobSpec, JobStatus, JobView, Placer
from controller.placement import PLACERS, make_placer
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces.formats.synthetic import generate
from policies.registry import make_policy

# CPU a pod asks per GPU in the host latency test: about the 11 cores openb's 1-GPU
# pods ask (/work/shared/data/openb), on nodes of 12 to 52 cores per GPU.
HOST_LATENCY_CPU_MILLI_PER_GPU = 11_000


class TimedPlacer:
    """Counts a placer's calls and the time spent in them."""

    def __init__(self, inner: Placer) -> None:
        self.inner = inner
        self.calls = 0
        self.seconds = 0.0

    def place(self, pool: GpuPool, job: JobView, num_gpus: int) -> Allocation | None:
        started = time.perf_counter()
        alloc = self.inner.place(pool, job, num_gpus)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return alloc


def replay(cluster_name: str, placer_name: str, jobs: list[JobSpec], interval_s: float) -> None:
    cluster = load_cluster(cluster_name)
    timed = TimedPlacer(make_placer(placer_name, cluster, seed=0))
    sim = Simulator(
        cluster,
        jobs,
        make_policy("fifo"),
        timed,
        SimConfig(round_interval_s=interval_s),
        trace_name="synthetic",
    )
    started = time.perf_counter()
    result = sim.run()
    wall_s = time.perf_counter() - started
    summary = summarize(result)
    figures = {
        "cluster": cluster_name,
        "placer": placer_name,
        "finished": summary.finished,
        "avg_jct_s": round(summary.avg_jct_s or 0.0, 1),
        "p99_jct_s": round(summary.p99_jct_s or 0.0, 1),
        "gpu_allocation": round(summary.gpu_allocation, 4),
        "gpu_utilization": round(summary.gpu_utilization, 4),
        "wall_s": round(wall_s, 2),
        "place_calls": timed.calls,
        "place_us": round(timed.seconds / max(1, timed.calls) * 1e6, 1),
    }
    print(json.dumps(figures))


def latency(
    cluster: Cluster, placer_name: str, calls: int = 20_000, cpu_milli_per_gpu: int = 0
) -> dict[int, float]:
    """Mean CPU microseconds per call, by gang size, on a ~90% allocated cluster; with
    `cpu_milli_per_gpu`, each job's pod asks that much CPU per GPU it has on a node."""
    placer = make_placer(placer_name, cluster, seed=0)
    rng = random.Random(1)
    pool = GpuPool.of_cluster(cluster)
    live: list[Allocation] = []
    spent: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for i in range(calls):
        while live and pool.total_free < 0.1 * cluster.num_gpus:
            pool.release(live.pop(rng.randrange(len(live))))
        n = rng.choice([1] * 7 + [2, 4, 4, 8, 16, 32])
        spec = JobSpec(
            f"j{i}",
            0.0,
            n,
            model=rng.choice(["resnet50", "vgg16", "bert"]),
            duration_s=1.0,
            cpu_milli=cpu_milli_per_gpu * min(n, cluster.max_gpus_per_node),
        )
        view = JobView(
            spec.job_id, spec, JobStatus.QUEUED, None, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0
        )
        started = time.process_time()
        alloc = placer.place(pool, view, n)
        took = time.process_time() - started
        if i >= calls // 10:  # after the caches are warm
            spent[n][0] += 1
            spent[n][1] += took
        if alloc is not None:
            pool.take(alloc)
            live.append(alloc)
    return {n: round(s / c * 1e6, 1) for n, (c, s) in sorted(spent.items())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=4000)
    p.add_argument("--clusters", default="dgx1-v100:32,16x4")
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--interval", type=float, default=60.0)
    p.add_argument("--placers", default=",".join(PLACERS))
    p.add_argument("--latency-nodes", type=int, default=256)
    # An openb node list (nodes stating CPU): latency with and without CPU requests.
    p.add_argument("--host-latency", default="")
    args = p.parse_args()
    placers = args.placers.split(",")
    for cluster_name in filter(None, args.clusters.split(",")):
        cluster = load_cluster(cluster_name)
        jobs = generate(args.jobs, seed=42, cluster_gpus=cluster.num_gpus, load=args.load)
        for placer_name in placers:
            replay(cluster_name, placer_name, jobs, args.interval)
    if args.latency_nodes > 0:
        for preset in ("dgx1-v100", "dgx-a100"):
            cluster = load_cluster(f"{preset}:{args.latency_nodes}")
            for placer_name in placers:
                per_size = latency(cluster, placer_name)
                weights = [7, 1, 2, 1, 1, 1]  # the draw above: 7/13 1-GPU, ...
                mean = sum(w * us for w, us in zip(weights, per_size.values(), strict=True))
                print(
                    json.dumps(
                        {
                            "latency_cluster": cluster.name,
                            "placer": placer_name,
                            "mean_us": round(mean / sum(weights), 1),
                            "us_by_gpus": per_size,
                        }
                    )
                )
    if args.host_latency:
        cluster = load_cluster(args.host_latency)
        for placer_name in placers:
            for cpu in (0, HOST_LATENCY_CPU_MILLI_PER_GPU):
                per_size = latency(cluster, placer_name, 5_000, cpu)
                print(
                    json.dumps(
                        {
                            "host_cluster": cluster.name,
                            "placer": placer_name,
                            "cpu_milli_per_gpu": cpu,
                            "us_by_gpus": per_size,
                        }
                    )
                )


if __name__ == "__main__":
    main()
