"""`replay` and `compare` on a trace with deadlines: the JSON gains deadline_jobs,
deadlines_met and deadline_ratio, and jobs.csv each job's deadline, whether it met it
and, for a job refused at admission, why."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from controller.metrics import HEADLINE_KEYS
from gpuflow.cli import main

TRACE = Path(__file__).parents[2] / "examples" / "traces" / "elasticflow" / "elasticVpollux_e.csv"
DEADLINE_KEYS = {"deadline_jobs", "deadlines_met", "deadline_ratio"}


@pytest.fixture()
def sliced(tmp_path: Path) -> Path:
    """The first 20 jobs of ElasticFlow's trace, in its own format."""
    lines = TRACE.read_text().splitlines()[:21]
    path = tmp_path / "elasticflow_20.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_compare_json_counts_the_deadlines_met(
    sliced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    args = ["compare", str(sliced), "--policies", "edf,elasticflow", "-c", "g4dn-12xlarge:2"]
    assert main([*args, "--json", "--jobs", "1", "--out", str(out)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["edf", "elasticflow"]
    for row in rows:
        assert set(row) == set(HEADLINE_KEYS) | DEADLINE_KEYS
        assert row["deadline_jobs"] == 20
        assert row["deadline_ratio"] == pytest.approx(row["deadlines_met"] / 20)
    with (out / "elasticflow" / "jobs.csv").open() as f:
        jobs = list(csv.DictReader(f))
    assert len(jobs) == 20
    met = [j for j in jobs if j["deadline_met"] == "True"]
    assert len(met) == rows[1]["deadlines_met"]
    for job in met:
        assert float(job["finish_s"]) <= float(job["deadline_s"])
    for job in jobs:
        if job["refused"]:
            assert job["deadline_met"] == "False" and not job["first_start_s"]


def test_replay_json_of_a_trace_with_deadlines(
    sliced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(sliced), "-p", "tiresias", "-c", "g4dn-12xlarge:2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= DEADLINE_KEYS and out["deadline_jobs"] == 20


def test_a_mapping_option_takes_its_policy_scope(
    sliced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The JSON value holds colons: the scope is read before the "=" only.
    opt = 'elasticflow:queue_gpus={"default": 4}'
    args = ["replay", str(sliced), "-p", "elasticflow", "-c", "g4dn-12xlarge:2", "--json"]
    assert main([*args, "--policy-opt", opt]) == 0
    bounded = json.loads(capsys.readouterr().out)["deadlines_met"]
    assert main(args) == 0
    assert bounded < json.loads(capsys.readouterr().out)["deadlines_met"]


def test_replay_round_anchor_event_runs_rounds_at_arrivals(
    sliced: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # On the grid a job waits for the next multiple of 60 s; anchored to events it
    # starts at its arrival (ElasticFlow's slots): job 1 arrives at 2,065 s, over a
    # slot after the last round, with GPUs free.
    starts = {}
    for anchor in ("grid", "event"):
        out = tmp_path / anchor
        argv = ["replay", str(sliced), "-p", "edf", "-c", "g4dn-12xlarge:2", "--out", str(out)]
        assert main([*argv, "--round-anchor", anchor]) == 0
        with (out / "jobs.csv").open() as f:
            starts[anchor] = {j["job_id"]: float(j["first_start_s"]) for j in csv.DictReader(f)}
    capsys.readouterr()
    assert starts["grid"]["1"] % 60 == 0 and starts["grid"]["1"] > 2065
    assert starts["event"]["1"] == 2065


def test_replay_event_overhead_holds_every_running_job_after_every_round(
    sliced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ElasticFlow's per-event overhead (SimConfig.event_overhead) only adds time: the
    # same EDF replay finishes later on average and meets no more deadlines.
    args = ["replay", str(sliced), "-p", "edf", "-c", "g4dn-12xlarge:2", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--event-overhead"]) == 0
    charged = json.loads(capsys.readouterr().out)
    assert charged["avg_jct_s"] > plain["avg_jct_s"]
    assert charged["deadlines_met"] <= plain["deadlines_met"]


def test_an_unknown_round_anchor_is_a_usage_error(
    sliced: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["replay", str(sliced), "-p", "edf", "-c", "4x4", "--round-anchor", "slot"])
    assert "--round-anchor" in capsys.readouterr().err
