"""bench/deadlines.py's ElasticFlow setting (issue 32): its runs' options are ones the
policies take, and a rigid run's jobs keep their traced GPU count only."""

from __future__ import annotations

from bench.deadlines import EVALUATION, RUNS, TRACE, rigid_job
from controller.traces import load_trace
from policies.registry import make_policy


def test_every_run_names_options_its_policy_takes() -> None:
    for run in RUNS:
        assert make_policy(run.policy, **run.options).name == run.policy
    assert {r.policy for r in RUNS if r.rigid} == {"gandiva"}
    assert all(r.options is EVALUATION["gandiva"] for r in RUNS if r.rigid)


def test_a_rigid_job_runs_at_its_traced_gpu_count_only() -> None:
    jobs = load_trace(TRACE).jobs
    elastic = [j for j in jobs if j.max_gpus > j.num_gpus]
    assert elastic  # the trace's jobs are elastic: the setting changes something
    for job in jobs:
        rigid = rigid_job(job)
        assert rigid.min_gpus == rigid.max_gpus == rigid.num_gpus == job.num_gpus
        assert (rigid.iterations, rigid.deadline_s, rigid.batch_size) == (
            job.iterations,
            job.deadline_s,
            job.batch_size,
        )
