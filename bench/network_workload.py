"""The workloads of the network benchmarks: models, gang sizes, clusters, arrivals.

Called by bench/network.py (the coflow-sharing replays, issue 5) and
bench/network_phase_replay.py (the phase-model replays of `--phases`, issue 19):
`workload` draws seeded jobs of one of `WORKLOADS`, `CLUSTERS` names the clusters
they run on. bench/network.py's docstring describes the workloads and clusters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from controller.model import Cluster, JobSpec
from controller.spec import load_cluster
from controller.spec.clos import lingjun_cluster
from controller.spec.yaml_spec import presets

CLUSTER = str(Path(__file__).resolve().parent.parent / "examples/clusters/comm-heavy-25g.yaml")
# (model, share): large gradients dominate; ResNet-50 and GPT-2 are compute-bound here.
MODELS = {
    "vgg16": 0.25,
    "bert": 0.15,
    "alexnet": 0.15,
    "lm": 0.15,
    "transformer": 0.15,
    "gpt2": 0.05,
    "resnet50": 0.10,
}
# Gang sizes: one server (4), two (8), four (16), eight (32); a few small jobs that
# fragment the servers for the topology-unaware placers.
GANGS = {1: 0.05, 2: 0.05, 4: 0.2, 8: 0.35, 16: 0.25, 32: 0.1}
# The papers' setting (CASSINI NSDI 2024 §5, Crux SIGCOMM 2024 §6): each job spends a
# minority of its iteration on the wire, so jobs sharing an oversubscribed uplink can
# take turns. On comm-heavy-25g at their rate alone these models' bursts take (2, 4
# nodes): ResNet-50 25/45 %, Inception-v3 18/37 %, A3C 17/25 %, CycleGAN 45/60 %,
# VGG16 48/64 % of an iteration; gangs of 2-4 servers keep them there.
TESTBED_MODELS = {"resnet50": 0.35, "inception3": 0.25, "a3c": 0.1, "cyclegan": 0.15, "vgg16": 0.15}
TESTBED_GANGS = {4: 0.1, 8: 0.45, 16: 0.35, 32: 0.1}
# Lingjun with jobs that cross ToRs (about 7 hosts each) and groups (about 40 ToRs):
# 32-256 GPUs, the comm-heavy models.
LINGJUN_GANGS = {32: 0.2, 64: 0.3, 128: 0.3, 256: 0.2}
WORKLOADS: dict[str, tuple[dict[str, float], dict[int, float]]] = {
    "comm-heavy": (MODELS, GANGS),
    "testbed": (TESTBED_MODELS, TESTBED_GANGS),
    "lingjun-large": (MODELS, LINGJUN_GANGS),
}


def _lingjun_25g() -> Cluster:
    """Lingjun's topology with comm-heavy-25g's servers (4 V100-PCIe, one 25 GbE NIC)
    and oversubscription (ToRs 4:1), groups 2:1: a communication-heavy Lingjun."""
    return lingjun_cluster(presets()[1]["pcie4"], tor_oversubscription=4.0)


def _comm_heavy_ecmp2() -> Cluster:
    """comm-heavy-25g with each rack's 50 Gbit/s uplink as two 25 Gbit/s ECMP lanes:
    a lane as fast as a NIC, so a ring alone runs as on the summed uplink, and two
    rings hashed onto one lane share it."""
    cluster = load_cluster(CLUSTER)
    racks = tuple(dataclasses.replace(rack, uplinks=2) for rack in cluster.racks)
    return dataclasses.replace(cluster, name="comm-heavy-25g-ecmp2", racks=racks)


CLUSTERS: dict[str, Callable[[], Cluster]] = {
    "comm-heavy-25g": lambda: load_cluster(CLUSTER),
    "comm-heavy-25g-ecmp2": _comm_heavy_ecmp2,
    "lingjun": lambda: load_cluster("lingjun"),
    "lingjun-25g": _lingjun_25g,
    "lingjun-25g-ecmp2": lambda: lingjun_cluster(
        presets()[1]["pcie4"], tor_oversubscription=4.0, lanes=2
    ),
}


ARRIVALS = ("poisson", "burst")


def workload(
    num_jobs: int,
    *,
    seed: int,
    cluster_gpus: int,
    load: float,
    mix: str = "comm-heavy",
    arrivals: str = "poisson",
) -> list[JobSpec]:
    """Seeded jobs of `WORKLOADS[mix]`: log-uniform 10 min - 4 h at their gang size,
    Poisson arrivals offering `load` (or all at t = 0 for `arrivals="burst"`; the
    same jobs either way)."""
    if arrivals not in ARRIVALS:
        raise ValueError(f"unknown arrivals {arrivals!r} (known: {', '.join(ARRIVALS)})")
    model_mix, gang_mix = WORKLOADS[mix]
    rng = np.random.default_rng(seed)
    models = rng.choice(list(model_mix), size=num_jobs, p=list(model_mix.values()))
    gangs = rng.choice(list(gang_mix), size=num_jobs, p=list(gang_mix.values()))
    durations = np.exp(rng.uniform(np.log(600.0), np.log(4 * 3600.0), size=num_jobs))
    mean_gpu_s = float(np.mean(gangs * durations))
    gap_s = mean_gpu_s / (load * cluster_gpus)
    times_s = np.cumsum(rng.exponential(gap_s, size=num_jobs))
    return [
        JobSpec(
            job_id=f"job{i:04d}",
            submit_s=round(float(times_s[i]), 3) if arrivals == "poisson" else 0.0,
            num_gpus=int(gangs[i]),
            model=str(models[i]),
            duration_s=round(float(durations[i]), 1),
        )
        for i in range(num_jobs)
    ]
