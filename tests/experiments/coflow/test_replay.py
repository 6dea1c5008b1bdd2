"""The coflow replay on tiny hand-made traces (hand-computed CCTs, the epoch rule,
coflowsim's flow sizes), the trace reader's errors, and the real FB trace."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from experiments.coflow.replay import ReplayConfig, admission_ms, replay
from experiments.coflow.trace import CoflowTraceError, read_trace
from gpuflow.coflow_cmd import add_parser
from tests.experiments.coflow.builders import write_trace

# 1 MiB per 8 ms, coflowsim's clock: a 125 MiB flow alone takes exactly 1 s.
COFLOWSIM_CLOCK = ReplayConfig(port_gbps=1.048576)
PER_FLOW = ReplayConfig(port_gbps=1.048576, reallocate="flow")
PER_COFLOW = ReplayConfig(port_gbps=1.048576, reallocate="coflow")
FB_TRACE = Path(__file__).parents[3] / "data" / "coflow" / "FB2010-1Hr-150-0.txt"


def ccts(path: Path, policy: str, config: ReplayConfig = COFLOWSIM_CLOCK) -> dict[int, float]:
    result = replay(read_trace(path), policy, config)
    return {o.coflow_id: round(o.cct_s, 9) for o in result.outcomes}


def test_one_flow_alone_runs_at_port_speed(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, 2, ["1 0 1 0 1 1:125.0"])
    for policy in ("fair", "sebf", "aalo", "sincronia"):
        assert ccts(trace, policy) == {1: 1.0}


@pytest.mark.parametrize(
    ("arrival_ms", "start_ms"),
    [(0, 0), (5000, 0), (10240, 0), (10241, 10240), (20480, 10240), (25000, 20480)],
)
def test_admission_epoch_is_the_one_whose_end_covers_the_arrival(
    arrival_ms: int, start_ms: int
) -> None:
    assert admission_ms(arrival_ms) == start_ms


def test_cct_counts_from_the_epoch_start(tmp_path: Path) -> None:
    # Coflow 2 arrives at 12 s: admitted at 10.24 s, done 1 s later.
    trace = write_trace(tmp_path, 4, ["1 5000 1 0 1 1:125.0", "2 12000 1 2 1 3:125.0"])
    result = replay(read_trace(trace), "fair", COFLOWSIM_CLOCK)
    by_id = {o.coflow_id: o for o in result.outcomes}
    assert by_id[1].start_s == 0.0
    assert by_id[1].cct_s == pytest.approx(1.0)
    assert by_id[2].start_s == pytest.approx(10.24)
    assert by_id[2].finish_s == pytest.approx(11.24)


def test_fair_shares_a_reducer_port_and_sebf_runs_the_small_coflow_first(
    tmp_path: Path,
) -> None:
    # Both send to port 1: 125 MiB from port 0, 250 MiB from port 2.
    trace = write_trace(tmp_path, 3, ["1 0 1 0 1 1:125.0", "2 0 1 2 1 1:250.0"])
    # Fair: half each until the small one is done at 2 s, then 125 MiB alone: 3 s.
    assert ccts(trace, "fair") == {1: 2.0, 2: 3.0}
    # SEBF: small alone for 1 s, then the large one's 250 MiB: done at 3 s.
    assert ccts(trace, "sebf") == {1: 1.0, 2: 3.0}
    assert ccts(trace, "sincronia") == {1: 1.0, 2: 3.0}


def test_aalo_demotes_the_elephant_at_10_mb_when_reallocating_per_flow(
    tmp_path: Path,
) -> None:
    trace = write_trace(tmp_path, 3, ["1 0 1 0 1 1:125.0", "2 0 1 2 1 1:125.0"])
    got = ccts(trace, "aalo-strict", PER_FLOW)
    # Strict priority, each coflow 131.072 MB on a 131.072 MB/s port: coflow 1 (FIFO
    # first) sends 10 MB and drops to queue 1, coflow 2 sends 10 MB and joins it;
    # FIFO again: coflow 1 reaches 100 MB and drops to queue 2, coflow 2 follows;
    # in queue 2 coflow 1 finishes first (after 131.072 + 100 MB have moved).
    assert got[1] == pytest.approx((131.072 + 100.0) / 131.072)
    assert got[2] == pytest.approx(2.0)


def test_aalo_resorts_its_queues_only_when_a_coflow_arrives_or_leaves(
    tmp_path: Path,
) -> None:
    # coflowsim's CoflowSimulatorDark: queues move in afterJobAdmission and
    # afterJobDeparture only, so coflow 1 (FIFO first) keeps the port to the end.
    trace = write_trace(tmp_path, 3, ["1 0 1 0 1 1:125.0", "2 0 1 2 1 1:125.0"])
    for policy in ("aalo", "aalo-strict"):
        assert ccts(trace, policy) == {1: 1.0, 2: 2.0}


def test_a_finished_flows_bandwidth_waits_for_the_next_coflow_event(tmp_path: Path) -> None:
    # Coflow 1: port 0 sends 125 MiB to port 1 and 250 MiB to port 2; coflow 2:
    # port 3 sends 250 MiB to port 1. Max-min: every flow 62.5 MiB/s (up link 0
    # and down link 1 both full), so 0>1 finishes at 2 s with 125 MiB left on each
    # of the other two flows.
    trace = write_trace(tmp_path, 4, ["1 0 1 0 2 1:125.0 2:250.0", "2 0 1 3 1 1:250.0"])
    # Reallocated at once, both remaining flows run at 125 MiB/s: done at 3 s.
    assert ccts(trace, "fair", PER_FLOW) == {1: 3.0, 2: 3.0}
    # coflowsim's FlowSimulator recomputes fair shares every quantum: the default.
    assert ccts(trace, "fair") == {1: 3.0, 2: 3.0}
    # Coflow rule: no coflow left at 2 s, so the rates hold: 125 MiB at 62.5 MiB/s.
    assert ccts(trace, "fair", PER_COFLOW) == {1: 4.0, 2: 4.0}


def test_unknown_reallocation_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="reallocate must be one of coflowsim, flow, coflow"):
        ReplayConfig(reallocate="never")


@pytest.mark.parametrize("gbps", [0.0, -1.0, float("nan")])
def test_a_port_must_have_a_speed(gbps: float) -> None:
    with pytest.raises(ValueError, match="port_gbps must be > 0"):
        ReplayConfig(port_gbps=gbps)


@pytest.mark.parametrize("value", ["0", "-2", "fast", "inf"])
def test_command_refuses_a_bad_port_speed_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    trace = write_trace(tmp_path, 2, ["1 0 1 0 1 1:125.0"])
    with pytest.raises(SystemExit) as exit_info:
        _cli(["coflow", str(trace), f"--port-gbps={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "coflow: error: argument --port-gbps: " in err[-1]


def test_flow_sizes_follow_coflowsim(tmp_path: Path) -> None:
    # 2 mappers, 3 MiB at port 1: rounded up to 4 MiB, 2 MiB per flow; 1.5 MiB
    # (port 2) rounds to 2 MiB, 1 per flow; a merged duplicate reducer port adds up.
    trace = write_trace(tmp_path, 4, ["7 0 2 0 3 3 1:3.0 2:1.5 2:0.2"])
    coflow = read_trace(trace).coflows[0]
    assert coflow.mappers == (0, 3)
    assert coflow.reducers == (1, 2)
    assert coflow.reducer_flow_mib == (2, 2)
    assert coflow.n_flows == 4


def test_bins_by_longest_flow_and_width(tmp_path: Path) -> None:
    wide = " ".join(str(p) for p in range(51))
    trace = write_trace(
        tmp_path,
        60,
        [
            "1 0 1 0 1 1:4.0",
            "2 0 1 2 1 3:5.0",
            f"3 0 51 {wide} 1 55:51.0",
            f"4 0 51 {wide} 1 56:510.0",
        ],
    )
    result = replay(read_trace(trace), "fair")
    assert {o.coflow_id: o.bin for o in result.outcomes} == {1: "SN", 2: "LN", 3: "SW", 4: "LW"}


@pytest.mark.parametrize(
    ("lines", "line", "field"),
    [
        (["1 0 x 0 1 1:1.0"], 2, "#mappers"),
        (["1 0 1 9 1 1:1.0"], 2, "mapper"),
        (["1 0 1 0 1 1-1.0"], 2, "reducer"),
        (["1 0 1 0 1 1:abc"], 2, "reducer"),
        (["1 0 1 0 2 1:1.0"], 2, "reducer"),
        (["1 -5 1 0 1 1:1.0"], 2, "arrival-ms"),
        (["1 0 1 0 1 1:1.0", "1 5 1 0 1 1:1.0"], 3, "id"),
    ],
)
def test_bad_lines_name_file_line_and_field(
    tmp_path: Path, lines: list[str], line: int, field: str
) -> None:
    trace = write_trace(tmp_path, 4, lines)
    with pytest.raises(CoflowTraceError) as err:
        read_trace(trace)
    assert str(err.value).startswith(f"{trace}:{line}: field '{field}': ")


def test_header_must_match_the_body(tmp_path: Path) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text("4 2\n1 0 1 0 1 1:1.0\n")
    with pytest.raises(CoflowTraceError, match=r"t.txt:2: field 'coflows'"):
        read_trace(trace)


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(argv)


def test_command_prints_exactly_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path, 3, ["1 0 1 0 1 1:125.0", "2 0 1 2 1 1:250.0"])
    args = _cli(["coflow", str(trace), "--policy", "sebf", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"policy", "coflows", "avg_cct_s", "p95_cct_s", "wall_s", "bins"}
    assert set(out["bins"]) == {"SN", "LN", "SW", "LW"}
    assert out["policy"] == "sebf"
    assert out["coflows"] == 2
    args = _cli(["coflow", str(trace), "--policy", "fair"])
    assert args.func(args) == 0
    assert "avg CCT" in capsys.readouterr().out


def test_command_takes_the_reallocation_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The trace of test_a_finished_flows_bandwidth_waits_for_the_next_coflow_event.
    trace = write_trace(tmp_path, 4, ["1 0 1 0 2 1:125.0 2:250.0", "2 0 1 3 1 1:250.0"])
    avg = {}
    for rule in ("flow", "coflow"):
        cmd = ["coflow", str(trace), "--policy", "fair", "--json", "--reallocate", rule]
        args = _cli([*cmd, "--port-gbps", "1.048576"])
        assert args.func(args) == 0
        avg[rule] = json.loads(capsys.readouterr().out)["avg_cct_s"]
    assert avg == {"flow": pytest.approx(3.0), "coflow": pytest.approx(4.0)}


def test_the_fb_trace_is_the_published_one() -> None:
    trace = read_trace(FB_TRACE)
    assert FB_TRACE.read_text().splitlines()[0] == "150 526"
    assert len(FB_TRACE.read_text().splitlines()) == 527
    assert len(trace.coflows) == 526
    assert trace.n_flows == 706_397


@pytest.mark.slow
def test_whole_fb_trace_orders_sebf_before_aalo_before_fair() -> None:
    # All 526 coflows and 706,397 flows, in coflowsim's model; seconds per policy
    # (bench/coflow.py records the times).
    trace = read_trace(FB_TRACE)
    results = {p: replay(trace, p) for p in ("sebf", "aalo", "fair")}
    for result in results.values():
        assert len(result.outcomes) == 526
        assert all(o.finish_s > o.start_s for o in result.outcomes)
    avg = {p: r.avg_cct_s for p, r in results.items()}
    assert avg["sebf"] < avg["aalo"] < avg["fair"]
    # Varys's gain over per-flow fairness is largest for long wide coflows.
    assert results["sebf"].bin_avg_cct_s()["LW"] < results["fair"].bin_avg_cct_s()["LW"]


@pytest.mark.slow
def test_first_100_coflows_keep_the_order_when_reallocating_per_flow() -> None:
    trace = read_trace(FB_TRACE)
    head = dataclasses.replace(trace, coflows=trace.coflows[:100])
    per_flow = ReplayConfig(reallocate="flow")
    avg = {p: replay(head, p, per_flow).avg_cct_s for p in ("sebf", "aalo", "fair")}
    assert avg["sebf"] < avg["aalo"] < avg["fair"]
