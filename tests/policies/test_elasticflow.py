"""ElasticFlow (ASPLOS 2023) and EDF replayed: admission by minimum satisfactory share,
refusal with a reason, elastic growth by marginal return, and more deadlines met than
EDF on a slice of the paper's own trace."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from controller.metrics import deadline_fields
from controller.model import Allocation, JobSpec, JobStatus, Snapshot
from controller.model.job import REFUSED
from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.placement import ConsolidatedPlacer
from controller.records import JobOutcome, ReplayResult
from controller.sim import SimConfig, Simulator
from controller.spec import load_cluster
from controller.traces import load_trace
from policies.elasticflow import ElasticFlow
from policies.elasticflow.shares import Demand, plan_shares
from policies.registry import UnknownPolicyError, make_policy
from tests.builders import make_cluster, make_job, make_view

TRACE = Path(__file__).parents[2] / "examples" / "traces" / "elasticflow" / "elasticVpollux_e.csv"


def _replay(jobs: list[JobSpec], policy: str, nodes: int = 1, gpus: int = 4) -> ReplayResult:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    cfg = SimConfig(round_interval_s=0.0, check_plans=True)
    return Simulator(cluster, jobs, make_policy(policy), ConsolidatedPlacer(cluster), cfg).run()


def test_a_job_no_share_can_finish_in_time_is_refused_and_never_runs() -> None:
    # 100 s of work on its 4 GPUs, which it cannot exceed, due 10 s after submission.
    hopeless = make_job("hopeless", 4, duration_s=100.0, deadline_s=10.0)
    fine = make_job("fine", 2, submit_s=1.0, duration_s=100.0, deadline_s=1000.0)
    result = _replay([hopeless, fine], "elasticflow")
    out = {o.job_id: o for o in result.jobs}
    assert out["hopeless"].first_start_s is None and out["hopeless"].finish_s is None
    assert out["hopeless"].refused is not None
    # Its work is 100 s on its 4 GPUs: the reason says so, and its deadline, in its own
    # terms (no clock), so that it reads the same in every backend.
    assert re.fullmatch(
        r"no share meets its deadline 10 s after submission: its \d+ iterations on 4 GPUs"
        r" take 100 s",
        out["hopeless"].refused,
    )
    assert out["hopeless"].deadline_met is False
    assert out["fine"].deadline_met is True
    assert deadline_fields(result) == {
        "deadline_jobs": 2,
        "deadlines_met": 1,
        "deadline_ratio": 0.5,
    }


def test_a_job_that_would_break_an_admitted_deadline_is_refused_saying_what_it_needs() -> None:
    # `first` needs all 4 GPUs of the node for most of its 300 s; `second`, due sooner,
    # could make it alone on 4 GPUs but only by taking them from `first`.
    first = make_job("first", 4, duration_s=250.0, deadline_s=300.0)
    second = make_job("second", 4, submit_s=10.0, duration_s=100.0, deadline_s=200.0)
    result = _replay([first, second], "elasticflow")
    out = {o.job_id: o for o in result.jobs}
    assert out["first"].deadline_met is True
    refused = out["second"].refused
    assert refused is not None and "needs 4 GPUs from 10 s" in refused
    assert "admitted before it leave too few" in refused
    # EDF admits everyone: `second` preempts `first`, which then misses its deadline.
    edf = {o.job_id: o for o in _replay([first, second], "edf").jobs}
    assert edf["second"].deadline_met is True and edf["first"].deadline_met is False


def test_an_elastic_job_alone_grows_past_its_share_by_marginal_return() -> None:
    # Due in a day, its minimum share is 1 GPU; the idle 7 others still speed it up.
    lone = make_job("lone", 1, min_gpus=1, max_gpus=8, duration_s=800.0, deadline_s=86400.0)
    result = _replay([lone], "elasticflow", nodes=2)
    (out,) = result.jobs
    assert out.attained_gpu_s / out.executed_s > 4.0  # it ran on 8 GPUs, not 1
    assert out.finish_s is not None and out.finish_s < 400.0


@pytest.mark.parametrize(("left", "grows"), [(0.01, False), (0.9, True)])
def test_a_running_job_grows_only_where_that_saves_more_than_its_restart(
    left: float, grows: bool
) -> None:
    """An elastic job on 2 of 8 idle GPUs: with 90 % of its work left, growing saves
    minutes against its ~10 s restart, so it takes all 8; with 1 % left the seconds it
    would save do not pay the restart, and it finishes where it is (the replay had
    grown such a job twice in its last second, where live it had finished)."""
    cluster = make_cluster(nodes=1, gpus=8)
    spec = make_job("lone", 2, min_gpus=1, max_gpus=8, duration_s=3600.0)
    on_two = Allocation.whole([(0, 0), (0, 1)])
    total = 3600.0
    view = make_view(
        spec,
        status=JobStatus.RUNNING,
        allocation=on_two,
        done_iters=total * (1.0 - left),
        total_iters=total,
    )
    snapshot = Snapshot(0.0, cluster, (view,), ConsolidatedPlacer(cluster))
    plan = ElasticFlow().schedule(snapshot, None)
    assert plan.run["lone"].num_gpus == (8 if grows else 2)


def test_the_refusal_reason_code_is_the_one_the_backends_withdraw() -> None:
    hopeless = make_job("hopeless", 4, duration_s=100.0, deadline_s=10.0)
    cluster = make_cluster(nodes=1, gpus=4)
    sim = Simulator(
        cluster, [hopeless], make_policy("elasticflow"), ConsolidatedPlacer(cluster), SimConfig()
    )
    sim.run()
    reason = sim.reason_for("hopeless")
    assert reason is not None and reason.code == REFUSED


def test_elasticflow_meets_more_deadlines_than_edf_on_a_slice_of_its_trace() -> None:
    jobs = list(load_trace(TRACE).jobs[:40])
    cluster = load_cluster("g4dn-12xlarge:4")
    met = {}
    for policy in ("edf", "elasticflow"):
        sim = Simulator(
            cluster, jobs, make_policy(policy), ConsolidatedPlacer(cluster), SimConfig()
        )
        met[policy] = deadline_fields(sim.run())["deadlines_met"]
    # 28 against 6 of the 40 when written (docs/benchmarks.md, "Deadlines").
    assert met["elasticflow"] >= 2 * met["edf"] + 10


def test_a_refused_job_a_backend_keeps_waiting_stays_refused() -> None:
    # A live cluster keeps the refused DLJob: each round refuses it again, with the
    # same reason, rather than testing it for admission anew.
    cluster = make_cluster(nodes=1, gpus=4)
    policy = make_policy("elasticflow")
    hopeless = make_view(make_job("hopeless", 4, deadline_s=10.0), total_iters=1e9)
    snapshot = Snapshot(
        now_s=0.0, cluster=cluster, jobs=(hopeless,), placer=ConsolidatedPlacer(cluster)
    )
    first = policy.schedule(snapshot, None)
    reason = first.reason_for("hopeless")
    assert reason is not None and reason.code == REFUSED and "hopeless" not in first.run
    later = Snapshot(
        now_s=1.0, cluster=cluster, jobs=(hopeless,), placer=ConsolidatedPlacer(cluster)
    )
    again = policy.schedule(later, first.state)
    assert again.reason_for("hopeless") == reason and not again.run


def test_a_best_effort_job_never_takes_the_gpus_an_admitted_deadline_needs() -> None:
    # `due` needs the whole node to finish in time; the best-effort job, there first and
    # running on 2 GPUs, gives them up (under FIFO it keeps them and `due` misses).
    besteffort = make_job("besteffort", 2, duration_s=500.0)
    due = make_job(
        "due", 4, submit_s=1.0, min_gpus=1, max_gpus=4, duration_s=200.0, deadline_s=230.0
    )
    out = {o.job_id: o for o in _replay([besteffort, due], "elasticflow").jobs}
    assert out["due"].deadline_met is True
    assert out["besteffort"].finish_s is not None  # it runs once `due` is done
    assert out["besteffort"].finish_s > out["due"].finish_s
    fifo = {o.job_id: o for o in _replay([besteffort, due], "fifo").jobs}
    assert fifo["due"].deadline_met is False


def test_a_live_job_measured_slower_than_the_model_gets_a_larger_share() -> None:
    cluster = make_cluster(nodes=1, gpus=8)
    policy = ElasticFlow()
    spec = make_job("live", 2, min_gpus=1, max_gpus=8, deadline_s=600.0)
    on_two = Allocation.whole([(0, 0), (0, 1)])
    base = make_view(spec, status=JobStatus.RUNNING, allocation=on_two)
    snapshot = Snapshot(
        now_s=0.0, cluster=cluster, jobs=(base,), placer=ConsolidatedPlacer(cluster)
    )
    curve = policy.speed_curve(snapshot, base)
    # Work the model finishes in the 600 s on 2 GPUs, not on 1, and on 4 at half speed.
    work = 0.9 * curve.speed(2) * 600
    assert curve.speed(1) * 600 < work <= 0.5 * curve.speed(4) * 600
    modelled = replace(base, total_iters=work, rate_ips=curve.speed(2))
    measured = replace(modelled, rate_source="measured", rate_ips=0.5 * curve.speed(2))
    for view, share in ((modelled, 2), (measured, 4)):
        shares, missed = plan_shares(
            0.0, 8, [Demand("live", 600.0, work, policy.speed_curve(snapshot, view))]
        )
        assert missed == [] and shares["live"].gpus == share


def test_a_queues_guarantee_bounds_what_its_deadline_jobs_are_promised() -> None:
    # Each job needs the 4 GPUs of one node for most of its 300 s. The cluster has 8:
    # without a bound both of queue a's jobs are admitted; with a's guarantee at 4 the
    # second is refused, while queue b's job beside them is admitted.
    def jobs() -> list[JobSpec]:
        return [
            replace(make_job("a1", 4, duration_s=250.0, deadline_s=300.0), queue="a"),
            replace(make_job("a2", 4, submit_s=1.0, duration_s=250.0, deadline_s=300.0), queue="a"),
            replace(make_job("b1", 4, submit_s=2.0, duration_s=250.0, deadline_s=300.0), queue="b"),
        ]

    cluster = make_cluster(nodes=2, gpus=4)
    cfg = SimConfig(round_interval_s=0.0, check_plans=True)
    free = Simulator(cluster, jobs(), make_policy("elasticflow"), ConsolidatedPlacer(cluster), cfg)
    assert deadline_fields(free.run())["deadlines_met"] == 2  # a1 and a2; b1 refused
    bounded = make_policy("elasticflow", queue_gpus={"a": 4})
    result = Simulator(cluster, jobs(), bounded, ConsolidatedPlacer(cluster), cfg).run()
    out = {o.job_id: o for o in result.jobs}
    assert out["a1"].deadline_met and out["b1"].deadline_met
    refused = out["a2"].refused
    assert refused is not None and "queue a's guarantee of 4" in refused


def test_under_quotas_the_trees_guarantees_bound_what_deadline_jobs_are_promised() -> None:
    """The same jobs with quotas on (SimConfig.queues) and no `queue_gpus`: the tree's
    guarantees reach the policy (Snapshot.queues), and queue a's 4 GPUs refuse a2 as
    the option did, while b1 in queue b is admitted. Alone on the idle cluster, b1 is
    refused where its queue is guaranteed nothing (it may borrow, but a deadline is
    promised only from a guarantee)."""

    def tree(a: int, b: int) -> QuotaTree:
        leaves = (QuotaNode("a", GpuQuota.of(a)), QuotaNode("b", GpuQuota.of(b)))
        return QuotaTree((QuotaNode("org", GpuQuota.of(8), children=leaves),))

    def replay(jobs: list[JobSpec], queues: QuotaTree) -> dict[str, JobOutcome]:
        cfg = SimConfig(round_interval_s=0.0, check_plans=True, queues=queues)
        sim = Simulator(cluster, jobs, make_policy("elasticflow"), ConsolidatedPlacer(cluster), cfg)
        return {o.job_id: o for o in sim.run().jobs}

    cluster = make_cluster(nodes=2, gpus=4)
    a1 = replace(make_job("a1", 4, duration_s=250.0, deadline_s=300.0), queue="a")
    a2 = replace(make_job("a2", 4, submit_s=1.0, duration_s=250.0, deadline_s=300.0), queue="a")
    b1 = replace(make_job("b1", 4, submit_s=2.0, duration_s=250.0, deadline_s=300.0), queue="b")
    split = replay([a1, a2, b1], tree(4, 4))
    assert split["a1"].deadline_met and split["b1"].deadline_met
    assert "queue a's guarantee of 4" in (split["a2"].refused or "")
    alone = replay([b1], tree(8, 0))
    assert "queue b's guarantee of 0" in (alone["b1"].refused or "")
    assert replay([b1], tree(4, 4))["b1"].deadline_met


def test_a_negative_queue_bound_is_refused_by_name() -> None:
    with pytest.raises(UnknownPolicyError, match="queue_gpus"):
        make_policy("elasticflow", queue_gpus={"a": -1})


def test_max_gpus_by_caps_the_sizes_elasticflow_plans_with() -> None:
    # ElasticFlow's evaluation caps ncf at 1 GPU (models.get_max_gpu on T4): its
    # speed curve, and so its shares and growth, stop there.
    cluster = make_cluster(nodes=2, gpus=4)
    spec = make_job("ncf", 1, model="ncf", min_gpus=1, max_gpus=8, deadline_s=600.0)
    view = make_view(spec)
    placer = ConsolidatedPlacer(cluster)
    snapshot = Snapshot(now_s=0.0, cluster=cluster, jobs=(view,), placer=placer)
    assert ElasticFlow().speed_curve(snapshot, view).sizes == (1, 2, 4, 8)
    capped = make_policy("elasticflow", max_gpus_by={"ncf": 1})
    assert isinstance(capped, ElasticFlow)
    assert capped.speed_curve(snapshot, view).sizes == (1,)
    result = Simulator(
        cluster,
        [replace(spec, duration_s=800.0, deadline_s=86400.0)],
        capped,
        ConsolidatedPlacer(cluster),
        SimConfig(round_interval_s=0.0, check_plans=True),
    ).run()
    (out,) = result.jobs
    assert out.attained_gpu_s / out.executed_s == pytest.approx(1.0, rel=0.05)
