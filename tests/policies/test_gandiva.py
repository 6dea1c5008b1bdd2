"""Gandiva: time-slicing, packing with introspection, migration, grow-shrink."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.model import Action, Allocation, GpuShare, JobSpec, JobStatus, JobView, Snapshot
from controller.placement import ConsolidatedPlacer
from policies.gandiva import Gandiva, GandivaState
from policies.gandiva.packing import Pack
from tests.builders import make_cluster, make_job, make_view
from tests.policies.invariants import check_round, random_snapshot


def _snapshot(views: list[JobView], now: float, nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=now, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


def _running(spec: JobSpec, gpus: list[tuple[int, int]], now: float, **kw: float) -> JobView:
    return make_view(
        spec, status=JobStatus.RUNNING, allocation=Allocation.whole(gpus), now_s=now, **kw
    )


def _slices(**starts: float) -> GandivaState:
    return GandivaState(slice_start_s=starts)


# -- time-slicing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "suspended", "started", "wake"),
    [
        (50.0, set(), set(), 60.0),  # no slice is over yet: wake when the first ends
        (60.0, {"a"}, {"c"}, 90.0),  # a's slice (from 0) ends; b's (from 30) at 90
        (95.0, {"a", "b"}, {"c", "d"}, 155.0),  # both over: both swapped out
    ],
)
def test_time_slicing_swaps_at_the_quantum_boundary(
    now: float, suspended: set[str], started: set[str], wake: float
) -> None:
    a = _running(make_job("a", 1), [(0, 0)], now)
    b = _running(make_job("b", 1), [(0, 1)], now)
    c = make_view(make_job("c", 1), waiting_since_s=5.0)
    d = make_view(make_job("d", 1), waiting_since_s=8.0)
    snap = _snapshot([a, b, c, d], now, gpus=2)
    plan = Gandiva(quantum_s=60.0).schedule(snap, _slices(a=0.0, b=30.0))
    assert set(plan.suspend) == suspended
    actions = plan.actions(snap)
    assert {j for j, act in actions.items() if act is Action.SUSPEND} == suspended
    assert {j for j, act in actions.items() if act is Action.START} == started
    for job_id in suspended:
        reason = plan.reason_for(job_id)
        assert reason is not None and reason.code == "Suspended"
    assert plan.wake_s == wake


def test_the_longest_waiting_job_resumes_first_on_the_victims_gpus() -> None:
    now = 200.0
    a = _running(make_job("a", 2), [(0, 0), (0, 1)], now)
    b = _running(make_job("b", 2), [(0, 2), (0, 3)], now)
    late = make_view(make_job("late", 2), waiting_since_s=150.0)
    early = make_view(
        make_job("early", 2), status=JobStatus.SUSPENDED, now_s=now, waiting_since_s=90.0
    )
    snap = _snapshot([a, b, late, early], now)
    plan = Gandiva().schedule(snap, _slices(a=150.0, b=0.0))
    # b's slice is over (a's is not); early waited longest and takes b's GPUs.
    assert plan.suspend == frozenset({"b"})
    assert plan.run["early"] == b.allocation
    assert plan.run["a"] is a.allocation
    reason = plan.reason_for("late")
    assert reason is not None and reason.code == "TimeSliced"
    assert isinstance(plan.state, GandivaState)
    assert plan.state.slice_start_s == {"a": 150.0, "early": now}


def test_a_large_gang_that_waited_a_quantum_suspends_smaller_jobs_of_one_node() -> None:
    now = 500.0
    views = [_running(make_job(f"s{g}", 1), [(0, g)], now) for g in range(4)]
    views += [_running(make_job(f"t{g}", 1), [(1, g)], now) for g in range(4)]
    big = make_view(make_job("big", 4), waiting_since_s=100.0)
    snap = _snapshot([*views, big], now, nodes=2)
    starts = {v.job_id: 0.0 for v in views} | {"t0": 450.0}  # t0's slice still runs
    plan = Gandiva().schedule(snap, GandivaState(slice_start_s=starts))
    assert plan.suspend == frozenset({"s0", "s1", "s2", "s3"})
    assert plan.run["big"].nodes == (0,)


def test_same_snapshot_and_state_give_the_same_plan_and_the_state_is_not_mutated() -> None:
    now = 120.0
    a = _running(make_job("a", 1), [(0, 0)], now)
    c = make_view(make_job("c", 1))
    snap = _snapshot([a, c], now, gpus=1)
    state = _slices(a=0.0)
    first = check_round(Gandiva(), snap, state)
    assert state == _slices(a=0.0)
    assert first.suspend == frozenset({"a"})


# -- packing and introspection ---------------------------------------------------------


def _packed_round(rate_host: float, rate_guest: float) -> tuple[Snapshot, GandivaState]:
    """Round 1 packs two NCF jobs on one GPU; returns round 2 (a quantum later) with
    the given measured speeds (nominal speed is 1 iteration/s)."""
    host = _running(make_job("host", 1, model="ncf"), [(0, 0)], 0.0)
    guest = make_view(make_job("guest", 1, model="ncf"))
    snap = _snapshot([host, guest], 0.0, gpus=1)
    plan = Gandiva().schedule(snap, _slices(host=-100.0))
    assert plan.actions(snap) == {"host": Action.RESHARE, "guest": Action.START}
    shares = [s for job_id in ("host", "guest") for s in plan.run[job_id].shares]
    assert sum(s.fraction for s in shares) == pytest.approx(1.0)
    assert isinstance(plan.state, GandivaState)
    assert plan.state.packs == (Pack("host", "guest", 0.0),)
    now = 120.0
    views = [
        replace(
            make_view(
                v.spec,
                status=JobStatus.RUNNING,
                allocation=plan.run[v.job_id],
                now_s=now,
                rate_ips=rate,
            ),
            resume_s=10.0,  # restarted (host) and started (guest) at 0
        )
        for v, rate in ((host, rate_host), (guest, rate_guest))
    ]
    return _snapshot(views, now, gpus=1), plan.state


@pytest.mark.parametrize(
    ("rate_host", "rate_guest", "kept"),
    [
        (0.9, 0.9, True),  # 1.8 GPUs' worth of work on one GPU: keep
        (0.55, 0.5, True),
        (0.5, 0.45, False),  # worse than time-slicing (sum 1): undo
        (0.3, 0.3, False),
    ],
)
def test_introspection_keeps_good_packs_and_undoes_bad_ones(
    rate_host: float, rate_guest: float, kept: bool
) -> None:
    snap, state = _packed_round(rate_host, rate_guest)
    plan = Gandiva().schedule(snap, state)
    assert isinstance(plan.state, GandivaState)
    if kept:
        assert set(plan.run) == {"host", "guest"} and not plan.suspend
        assert plan.state.packs == (Pack("host", "guest", 0.0, verified=True),)
        return
    assert plan.suspend == frozenset({"guest"})
    reason = plan.reason_for("guest")
    assert reason is not None and reason.code == "Unpacked"
    assert plan.run["host"] is snap.current["host"]  # the host keeps its share: no restart
    assert plan.state.banned_pairs == frozenset({("ncf", "ncf")})
    # The next round: the guest waits and is not packed with the host again.
    host = {v.job_id: v for v in snap.running()}["host"]
    guest = make_view(make_job("guest", 1, model="ncf"), status=JobStatus.SUSPENDED, now_s=180.0)
    host = replace(host, mark_s=180.0)
    again = Gandiva().schedule(_snapshot([host, guest], 180.0, gpus=1), plan.state)
    assert set(again.run) == {"host"}
    assert again.reason_for("guest") is not None


@pytest.mark.parametrize(
    ("host_model", "guest_model", "guest_mem", "packs"),
    [
        ("ncf", "ncf", None, True),  # 0.3 + 0.3 of a GPU, catalogue memory
        ("ncf", "lm", 3000, True),  # 0.3 + 0.6
        ("ncf", "cifar10", None, False),  # 0.3 + 0.7 is not below 1
        ("resnet50", "ncf", None, False),  # 0.95 + 0.3
        ("ncf", "ncf", 16000, False),  # 1500 + 16000 MiB exceed the 16 GiB GPU
    ],
)
def test_packs_only_light_jobs_that_fit_in_memory(
    host_model: str, guest_model: str, guest_mem: int | None, packs: bool
) -> None:
    host = _running(make_job("host", 1, model=host_model), [(0, 0)], 0.0)
    guest = make_view(make_job("guest", 1, model=guest_model, gpu_mem_mib=guest_mem))
    plan = Gandiva().schedule(_snapshot([host, guest], 0.0, gpus=1), None)
    assert ("guest" in plan.run) is packs


@pytest.mark.parametrize(
    ("host_util", "guest_util", "packs"),
    [
        (None, None, False),  # the catalogue: resnet50 0.95 + cifar10 0.7
        (0.06, None, True),  # the host measured at 6 % (the example MLP): 0.06 + 0.7
        (None, 0.06, False),  # 0.95 + 0.06 is not below 1
        (0.5, 0.06, True),  # 0.5 + 0.06, where the catalogue's 0.95 + 0.7 would not
        (0.5, 0.5, False),  # 0.5 + 0.5 is not below 1
    ],
)
def test_packing_follows_the_jobs_own_utilisation_over_the_catalogue(
    host_util: float | None, guest_util: float | None, packs: bool
) -> None:
    host = _running(make_job("host", 1, model="resnet50", gpu_util=host_util), [(0, 0)], 0.0)
    guest = make_view(make_job("guest", 1, model="cifar10", gpu_util=guest_util))
    plan = Gandiva().schedule(_snapshot([host, guest], 0.0, gpus=1), None)
    assert ("guest" in plan.run) is packs


def test_no_packing_for_jobs_without_memory_when_share_unsized_is_off() -> None:
    host = _running(make_job("host", 1, model="ncf"), [(0, 0)], 0.0)
    guest = make_view(make_job("guest", 1, model="ncf"))
    plan = Gandiva(share_unsized=False).schedule(_snapshot([host, guest], 0.0, gpus=1), None)
    assert "guest" not in plan.run


# -- migration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "moved", "to_node"),
    [
        # A 1-GPU job is the only thing between the 4-GPU gang and node 0.
        ({"a": [(0, 0)], "b": [(1, 0), (1, 1)], "c": [(1, 2)]}, "a", 1),
        # A 2-GPU gang moves whole (both GPUs at once) rather than two 1-GPU jobs.
        ({"b": [(0, 0), (0, 1)], "a": [(1, 0)], "c": [(1, 1)]}, "b", 1),
    ],
)
def test_a_fragmented_gang_is_placed_after_migrating_a_job(
    layout: dict[str, list[tuple[int, int]]], moved: str, to_node: int
) -> None:
    now = 1000.0
    running = [_running(make_job(j, len(gpus)), gpus, now) for j, gpus in layout.items()]
    gang = make_view(make_job("gang", 4))
    snap = _snapshot([*running, gang], now, nodes=2)
    plan = Gandiva().schedule(snap, None)
    actions = plan.actions(snap)
    assert actions["gang"] is Action.START and plan.run["gang"].num_gpus == 4
    assert len(plan.run["gang"].nodes) == 1
    assert actions[moved] is Action.MIGRATE
    assert plan.run[moved].nodes == (to_node,)
    assert plan.run[moved].num_gpus == len(layout[moved])
    assert [j for j, a in actions.items() if a is Action.MIGRATE] == [moved]


def test_without_a_migration_budget_the_gang_runs_spread_over_nodes() -> None:
    now = 1000.0
    a = _running(make_job("a", 1), [(0, 0)], now)
    b = _running(make_job("b", 2), [(1, 0), (1, 1)], now)
    c = _running(make_job("c", 1), [(1, 2)], now)
    gang = make_view(make_job("gang", 4))
    snap = _snapshot([a, b, c, gang], now, nodes=2)
    plan = Gandiva(max_migrations=0).schedule(snap, None)
    assert plan.run["gang"].nodes == (0, 1)
    assert Action.MIGRATE not in plan.actions(snap).values()


def test_a_multi_node_gang_moves_onto_one_node_when_it_frees_up() -> None:
    now = 1000.0
    # BERT runs 2.2x faster on one node: 100 s left, the move saves ~55 s for 12.5 s.
    split = _running(make_job("split", 2, model="bert"), [(0, 3), (1, 3)], now)
    other = _running(make_job("other", 2), [(0, 0), (0, 1)], now)
    snap = _snapshot([split, other], now, nodes=2)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap) == {"split": Action.MIGRATE, "other": Action.KEEP}
    assert plan.run["split"].nodes == (1,)


@pytest.mark.parametrize(
    ("model", "left_s"),
    [
        ("resnet50", 100.0),  # one node is 0.03 % faster: never worth a 10.6 s restart
        ("bert", 20.0),  # 2.2x faster, but saves ~11 s of 20 for a 12.5 s restart
    ],
)
def test_a_gang_is_not_moved_for_locality_that_does_not_pay_its_restart(
    model: str, left_s: float
) -> None:
    now = 1000.0
    spec = make_job("split", 2, model=model)
    split = _running(spec, [(0, 3), (1, 3)], now, done_iters=100.0 - left_s)
    other = _running(make_job("other", 2), [(0, 0), (0, 1)], now)
    snap = _snapshot([split, other], now, nodes=2)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap) == {"split": Action.KEEP, "other": Action.KEEP}


# -- grow-shrink -------------------------------------------------------------------------


def test_an_elastic_job_grows_into_idle_gpus_and_shrinks_when_a_job_waits() -> None:
    spec = make_job("e", 1, min_gpus=1, max_gpus=4)
    small = _running(spec, [(0, 0)], 100.0)
    snap = _snapshot([small], 100.0)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap) == {"e": Action.RESIZE}
    assert plan.run["e"].num_gpus == 4

    grown = _running(spec, list(plan.run["e"].gpus()), 200.0)
    newcomer = make_view(make_job("w", 1))
    snap = _snapshot([grown, newcomer], 200.0)
    plan = Gandiva().schedule(snap, plan.state)
    assert plan.actions(snap) == {"e": Action.RESIZE, "w": Action.START}
    assert plan.run["e"].num_gpus == 3  # only as many as the waiting job lacks


def test_no_shrink_that_starts_nobody() -> None:
    """1x4: a rigid job on 2 GPUs and an elastic one (1..4) on 2; a job asking 2 waits.
    Shrinking the elastic job to 1 frees one GPU, too few for the waiting job: it keeps
    its 2 (issue 25's contention set shrank it live and grew it back, two restarts)."""
    rigid = _running(make_job("r", 2), [(0, 0), (0, 1)], 100.0)
    elastic = _running(make_job("e", 2, min_gpus=1, max_gpus=4), [(0, 2), (0, 3)], 100.0)
    waiting = make_view(make_job("w", 2))
    snap = _snapshot([rigid, elastic, waiting], 100.0)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap)["e"] == Action.KEEP
    assert plan.run["e"].num_gpus == 2
    # The same with a waiting job asking 1: the shrink starts it.
    waiting = make_view(make_job("w", 1))
    snap = _snapshot([rigid, elastic, waiting], 100.0)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap) == {"r": Action.KEEP, "e": Action.RESIZE, "w": Action.START}


@pytest.mark.parametrize(("left_s", "grows"), [(100.0, True), (10.0, False)])
def test_an_elastic_job_grows_only_when_the_time_saved_pays_its_restart(
    left_s: float, grows: bool
) -> None:
    """On 4 GPUs ResNet-50 runs ~3.5x as fast as on 1: 100 s left save ~70 s for a
    10.6 s restart; 10 s left save ~7 s, less than the restart."""
    spec = make_job("e", 1, min_gpus=1, max_gpus=4)
    small = _running(spec, [(0, 0)], 100.0, done_iters=100.0 - left_s)
    snap = _snapshot([small], 100.0)
    plan = Gandiva().schedule(snap, None)
    assert plan.actions(snap) == {"e": Action.RESIZE if grows else Action.KEEP}


def test_reasons_name_why_jobs_wait() -> None:
    now = 10.0
    a = _running(make_job("a", 2), [(0, 0), (0, 1)], now)
    same = make_view(make_job("same", 2))
    huge = make_view(make_job("huge", 4))
    plan = Gandiva().schedule(_snapshot([a, same, huge], now, gpus=2), None)
    codes = {j: plan.reason_for(j) for j in ("same", "huge")}
    assert codes["same"] is not None and codes["same"].code == "TimeSliced"
    assert codes["huge"] is not None and codes["huge"].code == "InsufficientGpus"


def test_pack_allocations_are_valid_shares() -> None:
    host = _running(make_job("h", 2, model="ncf"), [(0, 0), (0, 1)], 0.0)
    guest = make_view(make_job("g", 2, model="a3c"))
    plan = check_round(Gandiva(), _snapshot([host, guest], 0.0, gpus=2))
    assert plan.run["g"].gpus() == plan.run["h"].gpus()
    assert all(isinstance(s, GpuShare) and s.fraction < 1 for s in plan.run["g"].shares)


# -- invariants and replays ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_round_invariants(seed: int) -> None:
    snap = random_snapshot(seed)
    check_round(Gandiva(), snap)
    # Every slice over: time-slicing, packing and node clearing all get exercised.
    expired = GandivaState({j.job_id: 0.0 for j in snap.running()})
    check_round(Gandiva(), snap, expired)


def _replay(policy: object, models: tuple[str, ...] | None = None) -> tuple[float, object]:
    from controller.metrics import summarize
    from controller.sim import SimConfig, Simulator
    from controller.traces.formats.synthetic import DEFAULT_MODELS, generate

    cluster = make_cluster(nodes=4, gpus=4, racks=2)
    jobs = generate(
        150, seed=7, cluster_gpus=cluster.num_gpus, load=1.5, models=models or DEFAULT_MODELS
    )
    sim = Simulator(
        cluster,
        jobs,
        policy,  # type: ignore[arg-type]
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=60.0, check_plans=True),
    )
    result = sim.run()
    assert all(o.finish_s is not None for o in result.jobs)
    return summarize(result).gpu_utilization, result


def test_replay_at_high_load_uses_the_gpus_better_than_fifo() -> None:
    from policies.fifo import Fifo

    fifo_util, _ = _replay(Fifo())
    gandiva_util, _ = _replay(Gandiva())
    assert gandiva_util > fifo_util + 0.05


def test_replay_of_light_jobs_packs_and_keeps_every_plan_valid() -> None:
    seen: list[int] = []

    class Counting:
        name = "gandiva"

        def __init__(self) -> None:
            self.inner = Gandiva()

        def schedule(self, snapshot: Snapshot, state: object) -> object:
            plan = self.inner.schedule(snapshot, state)
            seen.append(sum(1 for a in plan.run.values() if a.shared))
            return plan

    _replay(Counting(), models=("ncf", "a3c", "resnet50"))
    assert max(seen) >= 2  # at least one pack ran
