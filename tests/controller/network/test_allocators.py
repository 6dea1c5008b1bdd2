"""Allocators: the behaviour each paper defines, with hand-computed rates, and the
invariants every policy keeps (no link over capacity, work conservation)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.network import ALLOCATORS, Coflow, Flow, UnknownNetworkPolicyError, allocate
from controller.network.allocators.aalo import AaloConfig, aalo_rates, next_threshold_mb, queue_of
from controller.network.allocators.problem import from_records
from controller.network.allocators.varys import madd_in_order, sebf_order
from tests.controller.network.builders import make_coflow, make_flow, nics


def test_fair_two_flows_on_one_link_get_half_each() -> None:
    caps = nics("a", "b", "c")
    flows = [make_flow("f1", "x", "a>b", 100), make_flow("f2", "y", "a>c", 10)]
    rates = allocate("fair", caps, flows, [make_coflow("x"), make_coflow("y", 1)])
    assert rates == pytest.approx({"f1": 5.0, "f2": 5.0})


def test_fair_is_max_min_not_equal_split() -> None:
    # f1 and f2 share a's uplink; f2 and f3 share c's downlink (capacity 2).
    caps = nics("a", "b", "d") | {("nic-down", "c"): 2.0, ("nic-up", "c"): 10.0}
    flows = [
        make_flow("f1", "x", "a>b", 1),
        make_flow("f2", "x", "a>c", 1),
        make_flow("f3", "x", "d>c", 1),
    ]
    rates = allocate("fair", caps, flows, [make_coflow("x")])
    assert rates == pytest.approx({"f1": 9.0, "f2": 1.0, "f3": 1.0})


def test_madd_makes_a_coflows_flows_finish_together() -> None:
    # One coflow, 100 MB and 50 MB out of a's 10 Gbit/s uplink: Γ = 150 MB / 1250 MB/s.
    caps = nics("a", "b", "c")
    flows = [make_flow("f1", "x", "a>b", 100), make_flow("f2", "x", "a>c", 50)]
    rates = allocate("sebf", caps, flows, [make_coflow("x")])
    assert rates["f1"] == pytest.approx(100 / 0.12 / 125)
    assert rates["f2"] == pytest.approx(50 / 0.12 / 125)
    assert 100 / (rates["f1"] * 125) == pytest.approx(50 / (rates["f2"] * 125))


def test_madd_alone_takes_only_what_the_bottleneck_needs() -> None:
    caps = nics("a", "b", "c", "d")
    flows = [make_flow("f1", "x", "a>b", 100), make_flow("f2", "x", "c>d", 50)]
    arrays, _ = from_records(caps, flows, [make_coflow("x")])
    link_mb = arrays.coflow_link_mb()
    rates, _ = madd_in_order(arrays, sebf_order(arrays, link_mb), link_mb)
    # Γ = 100 MB / 1250 MB/s = 0.08 s: f2 needs only half of its link.
    assert rates.tolist() == pytest.approx([10.0, 5.0])


def test_sebf_serves_the_smaller_bottleneck_first() -> None:
    caps = nics("a", "b", "c")
    flows = [make_flow("big", "x", "a>b", 100), make_flow("small", "y", "a>c", 10)]
    coflows = [make_coflow("x", 0.0), make_coflow("y", 5.0)]
    assert allocate("sebf", caps, flows, coflows) == pytest.approx({"big": 0.0, "small": 10.0})


@pytest.mark.parametrize(
    ("attained", "queue"),
    [(0.0, 0), (9.99, 0), (10.0, 1), (99.0, 1), (100.0, 2), (1e30, 9)],
)
def test_aalo_queues_are_exponentially_spaced(attained: float, queue: int) -> None:
    assert int(queue_of(np.array([attained]))[0]) == queue


def test_aalo_next_threshold() -> None:
    got = next_threshold_mb(np.array([0.0, 10.0, 5e9]))
    assert got.tolist() == [10.0, 100.0, np.inf]


def test_aalo_demotes_a_coflow_past_10_mb() -> None:
    caps = nics("a", "b", "c")
    flows = [make_flow("old", "x", "a>b", 100), make_flow("new", "y", "a>c", 100)]
    fresh = [make_coflow("x", 0.0, attained_mb=9.0), make_coflow("y", 1.0)]
    assert allocate("aalo-strict", caps, flows, fresh) == pytest.approx({"old": 10.0, "new": 0.0})
    served = [make_coflow("x", 0.0, attained_mb=11.0), make_coflow("y", 1.0)]
    assert allocate("aalo-strict", caps, flows, served) == pytest.approx({"old": 0.0, "new": 10.0})
    # Weighted sharing (the paper's): queue 0 weighs K = 10, queue 1 weighs 9.
    assert allocate("aalo", caps, flows, served) == pytest.approx({"old": 90 / 19, "new": 100 / 19})


def test_aalo_is_fifo_within_a_queue_and_max_min_within_a_coflow() -> None:
    caps = nics("a", "b", "c", "d")
    flows = [
        make_flow("x1", "x", "a>b", 50),
        make_flow("x2", "x", "a>c", 50),
        make_flow("y1", "y", "a>d", 50),
    ]
    coflows = [make_coflow("x", 0.0), make_coflow("y", 1.0)]
    arrays, positions = from_records(caps, flows, coflows)
    rates = aalo_rates(arrays, AaloConfig(strict=True))
    got = {flows[i].flow_id: float(rates[p]) for p, i in enumerate(positions)}
    assert got == pytest.approx({"x1": 5.0, "x2": 5.0, "y1": 0.0})


def test_sincronia_prefers_the_job_closer_to_done() -> None:
    caps = nics("a", "b", "c")
    flows = [make_flow("f1", "x", "a>b", 10), make_flow("f2", "y", "a>c", 10)]
    coflows = [
        Coflow("x", arrival_s=0.0, job_remaining_s=3600.0),
        Coflow("y", arrival_s=1.0, job_remaining_s=60.0),
    ]
    assert allocate("sincronia", caps, flows, coflows) == pytest.approx({"f1": 0.0, "f2": 10.0})
    plain = [Coflow("x", arrival_s=0.0), Coflow("y", arrival_s=1.0)]
    assert allocate("sincronia", caps, flows, plain) == pytest.approx({"f1": 10.0, "f2": 0.0})


def test_finished_flows_get_nothing_and_take_nothing() -> None:
    caps = nics("a", "b", "c")
    flows = [make_flow("done", "x", "a>b", 0.0), make_flow("f", "x", "a>c", 5.0)]
    for policy in ALLOCATORS:
        assert allocate(policy, caps, flows, [make_coflow("x")]) == pytest.approx(
            {"done": 0.0, "f": 10.0}
        )


def test_unknown_policy_and_bad_records_are_errors() -> None:
    caps = nics("a", "b")
    flow = make_flow("f", "x", "a>b", 1)
    with pytest.raises(UnknownNetworkPolicyError, match="known: fair"):
        allocate("nope", caps, [flow], [make_coflow("x")])
    with pytest.raises(ValueError, match="unknown coflow"):
        allocate("fair", caps, [flow], [])
    with pytest.raises(ValueError, match="no capacity"):
        allocate("fair", nics("a"), [flow], [make_coflow("x")])


@st.composite
def instances(
    draw: st.DrawFn,
) -> tuple[dict[tuple[str, str | int], float], list[Flow], list[Coflow]]:
    n_links = draw(st.integers(1, 5))
    caps: dict[tuple[str, str | int], float] = {
        ("link", i): draw(st.sampled_from([0.0, 1.0, 2.5, 10.0, 40.0])) for i in range(n_links)
    }
    n_coflows = draw(st.integers(1, 3))
    coflows = [
        Coflow(f"c{i}", arrival_s=float(i), attained_mb=draw(st.sampled_from([0.0, 5.0, 50.0])))
        for i in range(n_coflows)
    ]
    flows = []
    for i in range(draw(st.integers(1, 8))):
        links = draw(st.sets(st.integers(0, n_links - 1), min_size=1, max_size=3))
        flows.append(
            Flow(
                f"f{i}",
                f"c{draw(st.integers(0, n_coflows - 1))}",
                tuple(("link", j) for j in sorted(links)),
                draw(st.floats(0.5, 1000.0)),
            )
        )
    return caps, flows, coflows


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(sorted(ALLOCATORS)))
def test_every_policy_respects_capacity_and_conserves_work(
    instance: tuple[dict[tuple[str, str | int], float], list[Flow], list[Coflow]],
    policy: str,
) -> None:
    caps, flows, coflows = instance
    rates = allocate(policy, caps, flows, coflows)
    usage = dict.fromkeys(caps, 0.0)
    for flow in flows:
        assert rates[flow.flow_id] >= 0.0
        for link in flow.links:
            usage[link] += rates[flow.flow_id]
    for link, cap in caps.items():
        assert usage[link] <= cap * (1 + 1e-6) + 1e-9
    for flow in flows:
        # Work-conserving: no flow could go faster without overfilling some link.
        assert any(usage[link] >= caps[link] * (1 - 1e-6) for link in flow.links)
