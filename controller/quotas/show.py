"""Issue 18's Show scenario: three teams guaranteed 50/30/20 % of a 16x8 cluster, one
of which floods it first.

Built here once for the test (tests/controller/queues/test_show.py), the figures
(bench/queues.py) and the operator's live version of it. Team `team-a` submits
`flood_jobs` jobs at time 0, more than the cluster holds, so it borrows every idle
GPU; teams `team-b` and `team-c` submit theirs from `others_at_s`, enough to stay
backlogged for hours alongside team-a. Gang sizes and durations come from a seeded
generator; `elastic` jobs (for Pollux) may run at half to twice their size.
"""

from __future__ import annotations

import random

from controller.model import JobSpec
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree

NODES = 16
GPUS_PER_NODE = 8
# 50/30/20 % of 128 GPUs, to whole GPUs (38.4 and 25.6 rounded so they add up to 128).
GUARANTEES = {"team-a": 64, "team-b": 38, "team-c": 26}
# The example weights: team-b takes twice team-a's part of idle GPUs.
WEIGHTS = {"team-a": 1.0, "team-b": 2.0, "team-c": 1.0}
SIZES = (1, 2, 4)  # small gangs keep shares close to the guarantees
MODEL = "resnet50"


def show_tree() -> QuotaTree:
    """The three teams under one organisation queue."""
    teams = tuple(
        QuotaNode(name, GpuQuota.of(gpus), weight=WEIGHTS[name])
        for name, gpus in GUARANTEES.items()
    )
    return QuotaTree((QuotaNode("org", GpuQuota.of(NODES * GPUS_PER_NODE), children=teams),))


def show_jobs(
    *,
    seed: int = 18,
    flood_jobs: int = 120,
    other_jobs: int = 90,
    others_at_s: float = 3600.0,
    elastic: bool = False,
) -> list[JobSpec]:
    """team-a's flood at 0, then team-b's and team-c's jobs over ten minutes."""
    rng = random.Random(seed)
    jobs: list[JobSpec] = []

    def add(team: str, k: int, submit_s: float) -> None:
        gpus = rng.choice(SIZES)
        low, high = (max(1, gpus // 2), gpus * 2) if elastic else (gpus, gpus)
        jobs.append(
            JobSpec(
                job_id=f"{team}-{k:03d}",
                submit_s=submit_s,
                num_gpus=gpus,
                min_gpus=low,
                max_gpus=high,
                model=MODEL,
                duration_s=rng.uniform(2.0, 6.0) * 3600.0,
                tenant=team,
            )
        )

    for k in range(flood_jobs):
        add("team-a", k, 0.0)
    for k in range(other_jobs):
        for team in ("team-b", "team-c"):
            add(team, k, others_at_s + rng.uniform(0.0, 600.0))
    return jobs
