"""EDF (ElasticFlow's deadline baseline): earliest deadline first, preemptive, jobs
without a deadline last, no admission; `gang=max` as ElasticFlow's own simulator runs
it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.model import Allocation, JobStatus, JobView, Snapshot
from controller.placement import ConsolidatedPlacer
from policies.edf import Edf
from policies.registry import UnknownPolicyError, make_policy
from tests.builders import make_cluster, make_job, make_view


def _snapshot(views: list[JobView], nodes: int = 1, gpus: int = 4) -> Snapshot:
    cluster = make_cluster(nodes=nodes, gpus=gpus)
    return Snapshot(
        now_s=0.0, cluster=cluster, jobs=tuple(views), placer=ConsolidatedPlacer(cluster)
    )


@pytest.mark.parametrize(
    ("jobs", "runs"),
    [
        # (id, GPUs, submit_s, deadline_s): the earliest deadlines fill the node.
        ([("a", 2, 0, 500), ("b", 2, 1, 100), ("c", 2, 2, 300)], {"b", "c"}),
        # A job that does not fit is passed over: the smaller one behind it runs.
        ([("a", 2, 0, 100), ("b", 4, 1, 200), ("c", 2, 2, 300)], {"a", "c"}),
        # Jobs without a deadline come last, in submission order.
        ([("a", 2, 0, None), ("b", 2, 1, None), ("c", 2, 2, 900)], {"a", "c"}),
    ],
)
def test_the_earliest_deadlines_run(
    jobs: list[tuple[str, int, float, float | None]], runs: set[str]
) -> None:
    views = [make_view(make_job(i, g, submit_s=s, deadline_s=d)) for i, g, s, d in jobs]
    plan = Edf().schedule(_snapshot(views), None)
    assert set(plan.run) == runs
    for job_id in {j[0] for j in jobs} - runs:
        reason = plan.reason_for(job_id)
        assert reason is not None and reason.code == "QueuedBehind"


def test_a_job_due_sooner_preempts_a_running_one() -> None:
    running = make_view(
        make_job("late", 4, deadline_s=1000.0),
        status=JobStatus.RUNNING,
        allocation=Allocation.whole((0, g) for g in range(4)),
    )
    urgent = make_view(make_job("urgent", 2, submit_s=5.0, deadline_s=50.0))
    plan = Edf().schedule(_snapshot([running, urgent]), None)
    assert set(plan.run) == {"urgent"}


def test_gang_max_gives_the_largest_size_then_a_power_of_two_of_what_is_left() -> None:
    first = make_view(make_job("first", 1, min_gpus=1, max_gpus=4, deadline_s=100.0))
    second = make_view(make_job("second", 1, min_gpus=1, max_gpus=8, deadline_s=200.0))
    third = make_view(make_job("third", 2, min_gpus=2, max_gpus=8, deadline_s=300.0))
    plan = Edf(gang="max").schedule(_snapshot([first, second, third], nodes=2), None)
    assert {k: a.num_gpus for k, a in plan.run.items()} == {"first": 4, "second": 4}
    asked = Edf().schedule(_snapshot([first, second, third], nodes=2), None)
    assert {k: a.num_gpus for k, a in asked.run.items()} == {"first": 1, "second": 1, "third": 2}


def test_an_unknown_gang_is_refused_by_name() -> None:
    with pytest.raises(UnknownPolicyError, match="gang"):
        make_policy("edf", gang="biggest")


def test_max_gpus_by_caps_gang_max_by_model_and_batch() -> None:
    # ElasticFlow's evaluation setting: a job runs at most at the largest size its
    # throughput table profiles; "model:batch" is read before "model".
    yolo = replace(
        make_job("yolo", 1, model="yolov3", min_gpus=1, max_gpus=8, deadline_s=100.0),
        batch_size=64,
    )
    other = make_job("other", 1, min_gpus=1, max_gpus=8, deadline_s=200.0)
    caps = {"yolov3:64": 2, "yolov3": 8, "resnet50": 4}
    policy = make_policy("edf", gang="max", max_gpus_by=caps)
    plan = policy.schedule(_snapshot([make_view(yolo), make_view(other)], nodes=2), None)
    assert {k: a.num_gpus for k, a in plan.run.items()} == {"yolo": 2, "other": 4}
    views = [make_view(yolo), make_view(other)]
    uncapped = Edf(gang="max").schedule(_snapshot(views, nodes=2), None)
    assert {k: a.num_gpus for k, a in uncapped.run.items()} == {"yolo": 8}


@pytest.mark.parametrize("caps", [{"yolov3": 0}, {"yolov3:big": 4}, {":64": 4}])
def test_a_bad_size_cap_is_refused_by_name(caps: dict[str, int]) -> None:
    with pytest.raises(UnknownPolicyError, match="max_gpus_by"):
        make_policy("edf", gang="max", max_gpus_by=caps)
