"""The simulator's ordered waiting queues (controller/sim/ordered.py) against a sort.

Random sequences of what happens to jobs (arrive, start, stop, finish, cancel), as
controller.sim.runs and the simulator change a record and `touch` it, with the table
refreshed now and then: after each refresh the queues kept from the changes must hold
exactly the waiting jobs, in the order a from-scratch sort of the waiting views
gives, for every key asked for, whether asked for from the start or only midway.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Allocation, JobStatus, JobView
from controller.sim.job import SimJob
from controller.sim.table import JobTable
from policies.fifo import fifo_key
from policies.gandiva import gandiva_key
from policies.srtf import srtf_key
from tests.builders import make_job

KEYS = (fifo_key, srtf_key, gandiva_key)

# One step: (what, which job, a number for its time or size).
_steps = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "start", "stop", "finish", "cancel", "refresh", "ask"]),
        st.integers(0, 24),
        st.integers(0, 7),
    ),
    max_size=80,
)


def _check(table: JobTable, asked: set[int]) -> None:
    table.refresh()
    waiting = list(table.views_wait.values())
    assert {v.job_id for v in waiting} == {
        i for i, j in table.active.items() if j.status is not JobStatus.RUNNING
    }
    queues = table.queues
    assert queues.gpus_asked() == sum(v.spec.num_gpus for v in waiting)
    assert queues.smallest_gang() == min((v.spec.num_gpus for v in waiting), default=0)
    for k in sorted(asked):
        key = KEYS[k]
        expected = sorted(waiting, key=key)
        assert [v.job_id for v in queues.in_order(key)] == [v.job_id for v in expected]
        by_size = {n: [v.job_id for v in jobs] for n, jobs in queues.by_size(key).items()}
        sizes = {v.spec.num_gpus for v in waiting}
        assert set(by_size) == sizes
        for n in sizes:
            assert by_size[n] == [v.job_id for v in expected if v.spec.num_gpus == n]
        # Each view handed out is the table's current one, not a stale copy.
        assert all(table.views_wait[v.job_id] is v for v in queues.in_order(key))


@settings(max_examples=150, deadline=None)
@given(steps=_steps, asked_first=st.sets(st.integers(0, len(KEYS) - 1)))
def test_queues_agree_with_a_sort_of_the_waiting_jobs(
    steps: list[tuple[str, int, int]], asked_first: set[int]
) -> None:
    table = JobTable()
    asked = set(asked_first)
    for k in asked:
        table.queues.in_order(KEYS[k])  # built now, kept from here on
    now = 0.0
    for what, i, x in steps:
        now += 1.0
        job_id = f"j{i:02d}"
        job = table.active.get(job_id)
        if what == "arrive" and job is None:
            # Few distinct times and priorities, so that ties fall to the later fields.
            spec = make_job(job_id, 1 << (x % 4), submit_s=float(x % 3), duration_s=60.0 + x)
            spec = replace(spec, priority=x % 2)
            job = SimJob(spec, 60.0 + x, 1.0, now)
            table.active[job_id] = job
            table.touch(job)
        elif what == "start" and job is not None and job.status is not JobStatus.RUNNING:
            job.status = JobStatus.RUNNING
            job.allocation = Allocation.whole((0, g) for g in range(job.spec.num_gpus))
            table.touch(job)
        elif what == "stop" and job is not None and job.status is JobStatus.RUNNING:
            job.status = JobStatus.PREEMPTED if x % 2 else JobStatus.SUSPENDED
            job.allocation = None
            job.done_iters = min(job.total_iters, job.done_iters + x)
            job.waiting_since_s = now
            table.touch(job)
        elif what in ("finish", "cancel") and job is not None:
            job.status = JobStatus.SUCCEEDED if what == "finish" else JobStatus.CANCELLED
            table.touch(job)
            del table.active[job_id]
        elif what == "refresh":
            _check(table, asked)
        elif what == "ask":
            asked.add(x % len(KEYS))
            _check(table, asked)
    _check(table, asked)


def test_a_touched_waiting_job_moves_to_its_new_place() -> None:
    """A waiting job whose key changes (here: its remaining work) is re-filed, not
    duplicated: the queue keeps one entry per job."""
    table = JobTable()
    jobs = []
    for i, work in enumerate((30.0, 10.0, 20.0)):
        job = SimJob(make_job(f"j{i}", 1, duration_s=work), work, 1.0, 0.0)
        table.active[job.spec.job_id] = job
        table.touch(job)
        jobs.append(job)
    table.refresh()
    order: list[JobView] = list(table.queues.in_order(srtf_key))
    assert [v.job_id for v in order] == ["j1", "j2", "j0"]
    jobs[0].done_iters = 25.0  # 5 s left: now the shortest
    table.touch(jobs[0])
    table.refresh()
    assert [v.job_id for v in table.queues.in_order(srtf_key)] == ["j0", "j1", "j2"]
