"""One scripted sequence of plans on both backends: the simulator and the operator
(against the strict API test server, with the test kubelet) end each step with the
same job states, allocations, batch sizes and restart counts, and refuse the same
invalid plan without changing anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from controller.loop import Controller
from controller.model import Allocation, GpuShare, JobSpec, JobView, Plan, PlanError, Reason
from controller.model import Snapshot as Snap
from controller.placement import make_placer
from controller.sim import SimConfig, Simulator
from operators.kube import KubeApi
from operators.operator import Operator, OperatorConfig
from tests.operators.builders import make_dljob
from tests.operators.harness import FAST_LEASE
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

WAIT = Reason("Scripted", "the script runs it later")
# job -> (GPUs asked, min, max, GPU memory: set, the job may share)
JOBS = {"a": (4, 2, 8, 4096), "b": (2, 2, 2, 4096), "c": (1, 1, 1, 4096)}


class Scripted:
    """A policy that returns whatever plan the test set."""

    name = "scripted"

    def __init__(self) -> None:
        self.plan = Plan(run={}, default_reason=WAIT)

    def schedule(self, snapshot: Snap, state: object) -> Plan:
        return self.plan


def whole(node: int, *gpus: int) -> Allocation:
    return Allocation.whole([(node, g) for g in gpus])


def half(node: int, *gpus: int) -> Allocation:
    return Allocation(tuple(GpuShare(node, g, 0.5) for g in gpus))


def state_of(jobs: list[JobView] | tuple[JobView, ...]) -> dict[str, Any]:
    return {
        j.job_id.split("/")[-1]: (
            j.status.value,
            None if j.allocation is None else sorted(j.allocation.shares),
            j.batch_size,
            j.restarts,
        )
        for j in jobs
    }


@pytest.fixture
def live(gpu_cluster: RealCluster) -> Iterator[tuple[Operator, Scripted]]:
    api = gpu_cluster.api
    for name, (gpus, lo, hi, mem) in JOBS.items():
        body = make_dljob(name, gpus, gpu_mem_mib=mem, duration_s=1000.0)
        body["spec"].update({"minGpus": lo, "maxGpus": hi, "batchSize": 64})
        api.create_dljob("default", body)
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()
    op = Operator(KubeApi(gpu_cluster.client), OperatorConfig(identity="both", lease=FAST_LEASE))
    op.start_threads()
    deadline = time.monotonic() + 10
    while not (op.elector.leading() and op.caches.synced() and len(op.backend.records()) == 3):
        assert time.monotonic() < deadline, "the operator never led with its caches synced"
        time.sleep(0.05)
    op.begin_term(op.elector.term)  # rounds driven here: this term's writes are allowed
    policy = Scripted()
    op.controller = Controller(policy)
    try:
        yield op, policy
    finally:
        op.stop()
        kubelet.stop()


def live_round(op: Operator) -> tuple[JobView, ...]:
    op.backend.sync()
    op.backend.writer.flush()
    op.controller.decide(op.backend)
    return op.backend.observe().jobs


def settle(op: Operator, want: dict[str, Any]) -> dict[str, Any]:
    """Rounds of the same plan until the live state is `want` (a start waits for the
    GPUs that a stopped pod holds until the kubelet has let it go) or 15 s pass."""
    deadline = time.monotonic() + 15
    while True:
        got = state_of(live_round(op))
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_one_script_of_plans_means_the_same_on_both_backends(
    live: tuple[Operator, Scripted],
) -> None:
    op, live_policy = live
    cluster = op.backend.observe().cluster
    specs = [
        JobSpec(
            f"default/{n}",
            0.0,
            g,
            model="resnet50",
            duration_s=3600.0,
            min_gpus=lo,
            max_gpus=hi,
            batch_size=64,
            gpu_mem_mib=mem,
        )
        for n, (g, lo, hi, mem) in JOBS.items()
    ]
    sim_policy = Scripted()
    sim = Simulator(
        cluster,
        specs,
        sim_policy,
        make_placer("consolidated", cluster),
        SimConfig(round_interval_s=0.0),
    )
    sim.advance(0.0)  # the jobs arrive; the script runs nothing yet

    script = [
        # a starts on node 0, b next to it: START, START
        Plan(run={"a": whole(0, 0, 1, 2, 3), "b": whole(0, 4, 5)}),
        # a new batch size on the same GPUs: REBATCH, no restart
        Plan(run={"a": whole(0, 0, 1, 2, 3), "b": whole(0, 4, 5)}, batch_sizes={"a": 128}),
        # b moves to node 1 so that a grows to 6 GPUs: MIGRATE, RESIZE (stops first)
        Plan(run={"a": whole(0, 0, 1, 2, 3, 4, 5), "b": whole(1, 0, 1)}),
        # c packs onto b's GPUs: b RESHARE (an MPS limit change restarts), c START
        Plan(run={"a": whole(0, 0, 1, 2, 3, 4, 5), "b": half(1, 0, 1), "c": half(1, 0)}),
        # a preempted, c suspended: PREEMPT, SUSPEND
        Plan(run={"b": half(1, 0, 1)}, suspend=frozenset({"default/c"})),
        # both back: START (from the checkpoint), RESUME
        Plan(run={"a": whole(0, 0, 1, 2, 3), "b": half(1, 0, 1), "c": half(1, 0)}),
    ]
    for step, plan in enumerate(script):
        full = Plan(
            run={f"default/{k}": v for k, v in plan.run.items()},
            default_reason=WAIT,
            suspend=plan.suspend,
            batch_sizes={f"default/{k}": v for k, v in plan.batch_sizes.items()},
        )
        sim_policy.plan = live_policy.plan = full
        sim.controller.decide(sim)
        want = state_of(sim.views())
        assert settle(op, want) == want, f"step {step}"

    # The expected end state, so that a bug common to both backends shows too.
    assert want == {
        "a": ("Running", sorted(whole(0, 0, 1, 2, 3).shares), 128, 2),
        "b": ("Running", sorted(half(1, 0, 1).shares), 64, 2),
        "c": ("Running", sorted(half(1, 0).shares), 64, 1),
    }

    # An over-allocating plan is refused by both, and changes nothing on either.
    bad = Plan(run={"default/a": whole(1, 0, 1), "default/b": half(1, 0, 1)}, default_reason=WAIT)
    sim_policy.plan = live_policy.plan = bad
    with pytest.raises(PlanError, match="default/a"):
        sim.controller.decide(sim)
    with pytest.raises(PlanError, match="default/a"):
        live_round(op)
    assert state_of(sim.views()) == want
    assert state_of(op.backend.observe().jobs) == want
