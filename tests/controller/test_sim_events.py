"""The simulator's event heap: sweeping outdated events keeps the live ones' order;
and its clock: when rounds run, on the grid or anchored to events."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from controller.placement import ConsolidatedPlacer
from controller.sim import SimConfig, Simulator
from controller.sim.events import FINISH, NODE, RERATE, SWEEP_AT_LEAST, WAKE, Clock, EventQueue
from controller.sim.job import SimJob
from policies.registry import make_policy
from tests.builders import make_cluster, make_job


def _drain(queue: EventQueue, active: dict[str, SimJob]) -> list[tuple[float, int, Any]]:
    """Every live event in the order the simulator's loop takes them."""
    out: list[tuple[float, int, Any]] = []
    while (t := queue.next_s(active)) != math.inf:
        for kind, data in queue.pop_due(t):
            if kind in (FINISH, RERATE):
                job = active.get(data[0])
                if job is None or job.version != data[1]:
                    continue  # outdated below the top: the loop's handlers skip it
            out.append((t, kind, data))
    return out


def _filled(seed: int) -> tuple[EventQueue, dict[str, SimJob]]:
    """A heap of random events, a third or more of them outdated, and its jobs."""
    rng = random.Random(seed)
    active = {f"j{i}": SimJob(make_job(f"j{i}"), 100.0, 1.0, 0.0) for i in range(50)}
    queue = EventQueue()
    for i in range(3 * SWEEP_AT_LEAST):
        job_id = f"j{rng.randrange(50)}"
        kind = rng.choice((FINISH, FINISH, RERATE, NODE, WAKE))
        t = float(rng.randrange(1000))  # many events share an instant
        if kind in (FINISH, RERATE):
            job = active[job_id]
            if rng.random() < 0.7:
                job.version += 1  # outdates this job's earlier events
            queue.push(t, kind, (job_id, job.version))
        else:
            queue.push(t, kind, i)
    for gone in ("j3", "j7"):  # finished: every event of theirs is outdated
        del active[gone]
    return queue, active


def test_a_swept_heap_yields_the_live_events_of_an_unswept_one_in_order() -> None:
    swept, active = _filled(16)
    unswept, same_jobs = _filled(16)
    unswept._sweep_at = 1 << 62  # never swept
    swept.next_s(active)
    assert len(swept._heap) < 2 * SWEEP_AT_LEAST  # swept, not only popped at the top
    taken = _drain(swept, active)
    assert taken == _drain(unswept, same_jobs)
    assert len(taken) > SWEEP_AT_LEAST // 2


def _rounds(anchor: str, changes: list[float]) -> list[float]:
    """When rounds run for changes at `changes` (60 s rounds): each change asks for a
    round, and the round due by the next change runs first."""
    clock = Clock(60.0, anchor)
    ran: list[float] = []
    for t in changes:
        if clock.next_round_s is not None and clock.next_round_s <= t:
            ran.append(clock.next_round_s)
            assert clock.take_round(clock.next_round_s)
        clock.now_s = t
        clock.request_round()
    assert clock.next_round_s is not None
    return [*ran, clock.next_round_s]


def test_rounds_anchored_to_events_run_at_a_change_or_a_slot_after_the_last() -> None:
    # ElasticFlow's slots: a change more than a slot after the last round is handled
    # at once; one within a slot of it waits to the slot's end. The grid waits for
    # the next multiple of the interval either way.
    assert _rounds("event", [10.0, 30.0, 200.0]) == [10.0, 70.0, 200.0]
    assert _rounds("grid", [10.0, 30.0, 200.0]) == [60.0, 240.0]


def test_an_unknown_round_anchor_is_refused_by_name() -> None:
    cluster = make_cluster(nodes=1, gpus=1)
    with pytest.raises(ValueError, match="round_anchor"):
        Simulator(
            cluster,
            [make_job("a")],
            make_policy("fifo"),
            ConsolidatedPlacer(cluster),
            SimConfig(round_anchor="slot"),
        )
