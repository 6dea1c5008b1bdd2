"""What a replay holds per job once the job has left: no spec (a million-job replay
would otherwise hold every JobSpec to its end; docs/benchmarks.md, issue 16 part 4)."""

from __future__ import annotations

import sys

from controller.model import JobSpec
from controller.placement import ConsolidatedPlacer
from controller.sim import Simulator
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def _references(jobs: list[JobSpec]) -> list[int]:
    return [sys.getrefcount(job) for job in jobs]


def test_a_replay_lets_go_of_the_specs_of_jobs_that_left() -> None:
    cluster = make_cluster(nodes=1, gpus=4)
    jobs = [make_job(f"j{i}", 1 + i % 2, submit_s=30.0 * i, duration_s=600.0) for i in range(40)]
    alone = _references(jobs)
    sim = Simulator(cluster, jobs, make_policy("fifo"), ConsolidatedPlacer(cluster))
    assert all(now > then for now, then in zip(_references(jobs), alone, strict=True))
    sim.advance(30.0 * 30 + 1)  # 31 have arrived, some have left
    left = {o.job_id for o in sim.outcomes}
    assert left and len(left) + len(sim.active) == 31
    now = _references(jobs)
    for job, count, then in zip(jobs, now, alone, strict=True):
        assert (count == then) == (job.job_id in left), job.job_id
    result = sim.run()
    assert len(result.jobs) == 40
    # At the end only the last round's snapshot and views hold a spec: the jobs that
    # ran in it, at most one per GPU.
    held = [job.job_id for job, n, m in zip(jobs, _references(jobs), alone, strict=True) if n > m]
    assert len(held) <= cluster.num_gpus and not left & set(held)
