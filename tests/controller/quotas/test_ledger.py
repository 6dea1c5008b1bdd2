"""The replay's per-queue report (controller.quotas.ledger): time-weighted shares over
the intervals where every leaf has demand, and Jain's index of share over guarantee."""

from __future__ import annotations

import pytest

from controller.model.quotas import GpuQuota, QuotaNode, QuotaTree
from controller.quotas.ledger import QuotaLedger, QuotaSample
from controller.records import JobOutcome


def ledger() -> QuotaLedger:
    tree = QuotaTree((QuotaNode("a", GpuQuota.of(4)), QuotaNode("b", GpuQuota.of(4))))
    book = QuotaLedger(tree)
    book.samples = [
        QuotaSample(0.0, (6.0, 2.0), (4.0, 4.0), (True, True)),
        QuotaSample(10.0, (8.0, 0.0), (8.0, 0.0), (True, False)),  # b has no demand
        QuotaSample(15.0, (4.0, 4.0), (4.0, 4.0), (True, True)),
    ]
    book.job_leaf = {"a1": "a", "a2": "a", "b1": "b"}
    book.reclaims = {"a": 2, "b": 0}
    return book


def outcome(job_id: str, submit_s: float, finish_s: float | None) -> JobOutcome:
    return JobOutcome(job_id, "t", "m", 1, submit_s, submit_s, finish_s, 1.0, 1.0, 1.0, 0, 0, 1.0)


def test_shares_are_averaged_over_the_contended_intervals_only() -> None:
    book = ledger()
    # [0, 10) and [15, 25) count; [10, 15) does not (b had no demand).
    assert [(s.t_s, d) for s, d in book.contended(25.0)] == [(0.0, 10.0), (15.0, 10.0)]
    means = book.mean_over_contended(25.0)
    assert means is not None
    assert means[0] == pytest.approx([5.0, 3.0])
    assert means[1] == pytest.approx([4.0, 4.0])


def test_the_report_per_leaf_and_jain() -> None:
    jobs = [outcome("a1", 0.0, 100.0), outcome("a2", 10.0, 30.0), outcome("b1", 0.0, None)]
    report = ledger().report(jobs, 25.0)
    assert report["queues"] == {
        "a": {"guarantee_gpus": 4, "mean_share_gpus": 5.0, "avg_jct_s": 60.0, "reclaims": 2},
        "b": {"guarantee_gpus": 4, "mean_share_gpus": 3.0, "avg_jct_s": None, "reclaims": 0},
    }
    # x = 5/4 and 3/4: (2)^2 / (2 * (25/16 + 9/16)) = 16/17.
    assert report["queue_fairness_jain"] == pytest.approx(16 / 17)


def test_without_a_contended_interval_there_is_no_share_to_judge() -> None:
    book = ledger()
    book.samples = book.samples[1:2]
    report = book.report([], 20.0)
    assert report["queue_fairness_jain"] is None
    assert report["queues"]["a"]["mean_share_gpus"] is None  # type: ignore[index]
