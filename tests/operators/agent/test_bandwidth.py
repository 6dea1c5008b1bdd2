"""The bandwidth enforcer: tc command building without root, then real links.

The real tests build two network namespaces joined by a veth pair, shape the
client end with `BandwidthEnforcer`, and measure with iperf3 what the server
receives. All traffic stays inside those namespaces (10.203.0.0/24).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from operators.agent.bandwidth import BandwidthEnforcer, PodRate
from operators.agent.htb import (
    DEFAULT_MINOR,
    MAX_QUANTUM_BYTES,
    MIN_BURST_BYTES,
    MIN_QUANTUM_BYTES,
    BandwidthError,
    burst_bytes,
    class_id,
    filter_add_args,
    parse_class_rates,
    parse_tc_rate,
    quantum_bytes,
    run_tc,
    tc_rate,
)
from tests.operators.agent.fake_tc import FakeTc
from tests.operators.agent.netns import (
    LINK_RATE_GBPS,
    POD_IP,
    Iperf,
    Link,
    assert_within,
    needs_netns,
    received_gbps,
    server_intervals,
    sh,
)

# --- without root: units, command building, bookkeeping ---------------------------


def pod(key: str, ip: str, rate_gbps: float) -> PodRate:
    return PodRate(pod_key=key, ip=ip, rate_gbps=rate_gbps)


@pytest.mark.parametrize(
    ("rate_gbps", "expected"),
    [(0.2, "200000000bit"), (0.05, "50000000bit"), (1.0, "1000000000bit"), (25, "25000000000bit")],
)
def test_rates_are_given_to_tc_in_bits_per_second(rate_gbps: float, expected: str) -> None:
    assert tc_rate(rate_gbps) == expected


def test_burst_covers_four_milliseconds_and_two_gso_packets() -> None:
    assert burst_bytes(0.05) == MIN_BURST_BYTES  # 50 Mbit/s: 25 kB in 4 ms, the floor wins
    assert burst_bytes(10.0) == 5_000_000  # 10 Gbit/s for 4 ms
    assert burst_bytes(100.0) == 50_000_000


def test_quantum_stays_inside_the_kernel_bounds() -> None:
    assert quantum_bytes(0.00001) == MIN_QUANTUM_BYTES
    assert quantum_bytes(0.01) == 10_000_000 // 8 // 10
    assert quantum_bytes(100.0) == MAX_QUANTUM_BYTES


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("123456Kbit", 0.123456),
        ("200Mbit", 0.2),
        ("1Gbit", 1.0),
        ("999bit", 999e-9),
        ("1Gibit", 2**30 / 1e9),
    ],
)
def test_tc_rates_parse_back_to_gbps(text: str, gbps: float) -> None:
    assert parse_tc_rate(text) == pytest.approx(gbps)


def test_class_rates_parse_from_text_and_json() -> None:
    text = (
        "class htb 1:1 root rate 100Gbit ceil 100Gbit burst 12500000b cburst 12500000b \n"
        "class htb 1:2 parent 1:1 leaf 2: prio 0 rate 200Mbit ceil 200Mbit burst 131072b \n"
    )
    assert parse_class_rates(text) == {"1:1": 100.0, "1:2": pytest.approx(0.2)}
    js = json.dumps([{"class": "htb", "handle": "1:2", "rate": 25_000_000}])
    assert parse_class_rates(js) == {"1:2": pytest.approx(0.2)}


def test_filters_match_the_source_address_of_each_family() -> None:
    v4 = filter_add_args("eth0", 2, "10.0.0.7")
    assert v4[v4.index("protocol") + 1] == "ip"
    assert v4[v4.index("match") :][:4] == ["match", "ip", "src", "10.0.0.7/32"]
    assert v4[-2:] == ["flowid", "1:2"]
    v6 = filter_add_args("eth0", 0x1F, "fd00::7")
    assert v6[v6.index("match") :][:4] == ["match", "ip6", "src", "fd00::7/128"]
    assert v6[-1] == "1:1f"  # tc reads class minors as hex


def test_pod_rates_are_validated() -> None:
    with pytest.raises(ValueError):
        pod("a", "10.0.0.300", 1.0)
    with pytest.raises(ValueError):
        pod("a", "10.0.0.1", 0.0)
    with pytest.raises(ValueError):
        BandwidthEnforcer("eth0", runner=FakeTc()).apply(
            [pod("a", "10.0.0.1", 1.0), pod("b", "10.0.0.1", 1.0)]
        )


def test_first_apply_builds_the_tree_in_the_netns() -> None:
    tc = FakeTc()
    BandwidthEnforcer("veth0", netns="ns1", leaf_qdisc="fq_codel", runner=tc).apply(
        [pod("a", "10.0.0.1", 0.2)]
    )
    assert all(argv[:3] == ["tc", "-netns", "ns1"] for argv in tc.calls)
    assert tc.verbs() == [
        "qdisc replace",  # root htb
        "class add",  # 1:1, the link
        "class add",  # 1:ffff, the default
        "qdisc add",  # its fq_codel
        "class add",  # pod a
        "qdisc add",
        "filter add",
    ]
    root = tc.calls[1]
    assert root[root.index("default") + 1] == f"{DEFAULT_MINOR:x}"
    pod_class = tc.calls[5]
    assert pod_class[pod_class.index("classid") + 1] == "1:2"
    assert pod_class[pod_class.index("rate") + 1] == pod_class[pod_class.index("ceil") + 1]


def test_apply_is_incremental_and_idempotent() -> None:
    tc = FakeTc()
    enf = BandwidthEnforcer("eth0", leaf_qdisc=None, runner=tc)
    enf.apply([pod("a", "10.0.0.1", 0.2), pod("b", "10.0.0.2", 0.05)])
    tc.calls.clear()
    enf.apply([pod("b", "10.0.0.2", 0.05), pod("a", "10.0.0.1", 0.2)])
    assert tc.verbs() == []
    enf.apply([pod("a", "10.0.0.1", 0.1), pod("b", "10.0.0.2", 0.05)])
    assert tc.verbs() == ["class change"]
    tc.calls.clear()
    enf.apply([pod("b", "10.0.0.9", 0.05)])  # a leaves, b moves to another IP
    assert tc.verbs() == ["filter del", "class del", "filter del", "filter add"]


def test_class_ids_are_deterministic_and_reused() -> None:
    enf = BandwidthEnforcer("eth0", runner=FakeTc())
    enf.apply([pod(k, f"10.0.0.{i + 1}", 0.1) for i, k in enumerate("abc")])
    assert [enf.class_of(k) for k in "abc"] == ["1:2", "1:3", "1:4"]
    enf.apply([pod("a", "10.0.0.1", 0.1), pod("c", "10.0.0.3", 0.1)])
    assert enf.class_of("b") is None
    enf.apply([pod(k, f"10.0.0.{i + 1}", 0.1) for i, k in enumerate("acd")])
    assert enf.class_of("d") == "1:3"  # b's freed id, the lowest free


def test_a_failed_apply_rebuilds_the_tree_next_time() -> None:
    tc = FakeTc()
    enf = BandwidthEnforcer("eth0", runner=tc)
    tc.fail_on = "filter"
    with pytest.raises(BandwidthError):
        enf.apply([pod("a", "10.0.0.1", 0.2)])
    tc.fail_on = None
    tc.calls.clear()
    enf.apply([pod("a", "10.0.0.1", 0.2)])
    assert tc.verbs()[0] == "qdisc replace"
    assert enf.class_of("a") == "1:2"


def test_current_reads_the_pods_classes_back() -> None:
    shown = (
        "class htb 1:2 parent 1:1 leaf 2: prio 0 rate 123456Kbit ceil 123456Kbit burst 131072b\n"
    )
    enf = BandwidthEnforcer("eth0", runner=FakeTc(class_show=shown))
    enf.apply([pod("a", "10.0.0.1", 0.123456)])
    assert enf.current() == {"a": pytest.approx(0.123456)}


def test_tc_failures_carry_stderr_on_one_line() -> None:
    with pytest.raises(BandwidthError, match=r"^sh -c .*: line one line two$"):
        run_tc(["sh", "-c", "echo 'line one' >&2; echo '  line two' >&2; exit 2"])
    with pytest.raises(BandwidthError, match="not found"):
        run_tc(["/nonexistent/tc"])


# --- on real links: network namespaces, a veth pair, iperf3 ----------------------


@pytest.fixture
def enforcer(link: Link) -> Iterator[BandwidthEnforcer]:
    enf = BandwidthEnforcer(link.client_dev, netns=link.client_ns,
                            link_rate_gbps=LINK_RATE_GBPS, leaf_qdisc=link.leaf_qdisc)  # fmt: skip
    try:
        yield enf
    finally:
        enf.clear()


def shaped(rates: dict[str, float]) -> list[PodRate]:
    return [pod(k, POD_IP[k], r) for k, r in rates.items()]


def default_class_bytes(link: Link) -> int:
    out = sh("tc", "-netns", link.client_ns, "-s", "class", "show", "dev", link.client_dev,
             "classid", class_id(DEFAULT_MINOR))  # fmt: skip
    m = re.search(r"Sent (\d+) bytes", out)
    assert m is not None, out
    return int(m[1])


@pytest.mark.netns
@needs_netns
def test_two_pods_get_their_rates_at_once(link: Link, enforcer: BandwidthEnforcer) -> None:
    rates = {"pod-a": 0.2, "pod-b": 0.05}
    enforcer.apply(shaped(rates))
    assert enforcer.current() == {k: pytest.approx(r, rel=1e-3) for k, r in rates.items()}
    with ExitStack() as stack:
        runs = {
            k: stack.enter_context(Iperf(link, ip, 5301 + i, 3, 1))
            for i, (k, ip) in enumerate(POD_IP.items())
        }
        measured = {k: received_gbps(run.result()) for k, run in runs.items()}
    print(f"assigned {rates} measured {measured}")
    for k, r in rates.items():
        assert_within(measured[k], r, k)


@pytest.mark.netns
@needs_netns
def test_a_pod_gets_one_gigabit(link: Link, enforcer: BandwidthEnforcer) -> None:
    enforcer.apply([pod("pod-a", POD_IP["pod-a"], 1.0)])
    measured = received_gbps(Iperf(link, POD_IP["pod-a"], 5303, 3, 1).result())
    print(f"assigned 1.0 measured {measured}")
    assert_within(measured, 1.0, "pod-a")


@pytest.mark.netns
@needs_netns
def test_reassignment_takes_effect_within_a_second(link: Link, enforcer: BandwidthEnforcer) -> None:
    before = {"pod-a": 0.2, "pod-b": 0.05}
    after = {"pod-a": 0.05, "pod-b": 0.2}  # one pod slows down, the other speeds up
    enforcer.apply(shaped(before))
    with ExitStack() as stack:
        launched = time.monotonic()
        runs = {
            k: stack.enter_context(Iperf(link, ip, 5304 + i, 4, 0.25))
            for i, (k, ip) in enumerate(POD_IP.items())
        }
        time.sleep(max(0.0, launched + 1.5 - time.monotonic()))
        enforcer.apply(shaped(after))
        # iperf3's clock starts when its test starts, a little after launch: measured
        # from launch, the change looks later than it was, so the window below (from
        # the interval holding change + 1 s) starts no later than 1 s after the change.
        changed_s = time.monotonic() - launched
        reports = {k: run.result() for k, run in runs.items()}
    for k in before:
        intervals = server_intervals(reports[k])
        print(k, [(round(s, 2), round(g * 1e3, 1)) for s, _, g in intervals])
        held = [(s, g) for s, e, g in intervals if e > changed_s + 1.0 and e - s > 0.2]
        assert len(held) >= 4, intervals
        for start_s, gbps in held:
            assert_within(gbps, after[k], f"{k} at {start_s:.2f} s (changed at {changed_s:.2f} s)")
        settled = [(s, g) for s, e, g in intervals if e < changed_s - 0.25 and s > 0.5]
        for start_s, gbps in settled:
            assert_within(gbps, before[k], f"{k} at {start_s:.2f} s, before the change")


@pytest.mark.netns
@needs_netns
def test_a_pod_that_leaves_falls_back_to_the_default_class(
    link: Link, enforcer: BandwidthEnforcer
) -> None:
    enforcer.apply([pod("pod-a", POD_IP["pod-a"], 0.2), pod("pod-b", POD_IP["pod-b"], 0.05)])
    enforcer.apply([pod("pod-a", POD_IP["pod-a"], 0.2)])
    assert enforcer.class_of("pod-b") is None
    assert set(enforcer.current()) == {"pod-a"}
    sent_before = default_class_bytes(link)
    measured = received_gbps(Iperf(link, POD_IP["pod-b"], 5306, 2, 1).result())
    print(f"pod-b unshaped: {measured} Gbit/s")
    assert measured > 4 * 0.05  # no longer held at its old 50 Mbit/s
    assert default_class_bytes(link) - sent_before > 0.5 * measured * 1e9 / 8 * 2
