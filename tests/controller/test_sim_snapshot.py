"""The simulator's snapshot builds its waiting jobs only when read (Snapshot.deferred):
read, they are the jobs an eager snapshot holds; read after the round moved the
simulation on, they are refused rather than mixed with the next round's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.model import JobStatus, Snapshot
from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from policies.fifo import fifo_key
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def _simulator() -> Simulator:
    cluster = make_cluster(nodes=1, gpus=4)
    jobs = [make_job(f"j{i}", 1 + i % 3, submit_s=float(i), duration_s=900.0) for i in range(9)]
    config = SimConfig(round_interval_s=60.0)
    return Simulator(cluster, jobs, make_policy("fifo"), ConsolidatedPlacer(cluster), config)


def test_deferred_snapshot_reads_as_an_eager_one() -> None:
    sim = _simulator()
    sim.advance(600.0)
    snapshot = sim.observe()
    assert snapshot.waiting_jobs is None  # nothing built yet
    count = snapshot.waiting_count()
    eager = Snapshot(
        now_s=snapshot.now_s,
        cluster=snapshot.cluster,
        jobs=tuple(sim.views()),
        placer=snapshot.placer,
    )
    assert count == len(eager.waiting()) > 0
    assert [j.job_id for j in snapshot.waiting()] == [j.job_id for j in eager.waiting()]
    assert {j.job_id for j in snapshot.jobs} == {j.job_id for j in eager.jobs}
    assert all(j.status is JobStatus.RUNNING for j in snapshot.running())
    ordered = [j.job_id for j in snapshot.waiting_in_order(fifo_key)]
    assert ordered == [j.job_id for j in eager.waiting_in_order(fifo_key)]
    # A copy (as a policy wrapper makes) keeps every field, the job tuples included.
    copy = replace(snapshot, ordered=None)
    assert copy.jobs == snapshot.jobs and copy.waiting() == snapshot.waiting()


def test_deferred_snapshot_read_too_late_is_refused() -> None:
    sim = _simulator()
    sim.advance(600.0)
    snapshot = sim.observe()
    sim.advance(7200.0)  # rounds ran, jobs finished and started
    with pytest.raises(RuntimeError, match="too late"):
        snapshot.waiting()


def test_a_snapshot_with_another_placer_still_defers_its_waiting_jobs() -> None:
    """Snapshot.with_placer (the policies that choose a GPU type wrap the placer) shares
    what the snapshot holds and builds the waiting jobs only when read."""
    sim = _simulator()
    sim.advance(600.0)
    snapshot = sim.observe()
    other = ConsolidatedPlacer(snapshot.cluster)
    copy = snapshot.with_placer(other)
    assert copy.placer is other and snapshot.placer is not other
    assert snapshot.with_placer(snapshot.placer) is snapshot
    assert copy.waiting_jobs is None and copy.waiting_count() == snapshot.waiting_count()
    assert [j.job_id for j in copy.waiting()] == [j.job_id for j in snapshot.waiting()]
    assert copy.running() == snapshot.running() and copy.current == snapshot.current
