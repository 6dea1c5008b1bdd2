"""bench/contention.py without its live side: the replay of issue 25's sets, the reading
of `sandbox run --json`, the table and the arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.contention import main, makespan_s, parse_args, parse_live, replay_run, table
from gpuflow.sandbox.example_jobs import CONTENTION_SETS, example_job
from policies.registry import policy_names


def test_the_sets_build_the_example_manifest_resized() -> None:
    shapes = {s.name: s for s in CONTENTION_SETS["elastic"].jobs}
    body = example_job(shapes["ela"])
    assert body["metadata"]["name"] == "ela"
    assert (body["spec"]["gpus"], body["spec"]["minGpus"], body["spec"]["maxGpus"]) == (2, 1, 4)
    assert "--steps=600" in body["spec"]["template"]["spec"]["containers"][0]["command"]
    assert body["spec"]["checkpoint"]["path"] == "/checkpoints/ela"
    assert sum(s.gpus for s in CONTENTION_SETS["gang"].jobs) == 10


def test_fifo_replays_the_gang_set_in_arrival_order_at_the_given_speed() -> None:
    # 10 ms a step and a 1 s process start: gang 4 + 1 s, s1 and s2 15 + 1 s each.
    # Under FIFO the gang, first in the manifests, takes all 8 GPUs; the 1-GPU jobs
    # start when it ends.
    speed = {"gang": 0.01, "s1": 0.01, "s2": 0.01}
    got = replay_run(CONTENTION_SETS["gang"], "fifo", speed, start_s=1.0)
    assert got["gang"].jct_s == pytest.approx(5.0, abs=0.01)
    assert got["s1"].jct_s == pytest.approx(21.0, abs=0.01)
    assert all(f.restarts == 0 and f.batch_changes == 0 for f in got.values())
    assert makespan_s(got) == pytest.approx(21.0, abs=0.01)


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_replays_the_elastic_set_to_the_end(policy: str) -> None:
    got = replay_run(CONTENTION_SETS["elastic"], policy, {}, start_s=2.0)
    assert sorted(got) == ["ela", "elb", "rigid"]
    assert all(f.status == "Succeeded" and f.jct_s for f in got.values()), got


def test_a_failed_live_run_is_reported_with_its_reason() -> None:
    out = {
        "jobs": [
            {
                "name": "a",
                "status": "Succeeded",
                "restarts": 1,
                "batch_sizes": [64, 128],
                "measured_rate_ips": 50.0,
                "jct_s": 12.0,
            },
            {
                "name": "b",
                "status": "Running",
                "restarts": 0,
                "batch_sizes": [],
                "measured_rate_ips": None,
                "jct_s": None,
            },
        ],
        "wall_s": 30.0,
    }
    run = parse_live(1, json.dumps(out), "gpuflow: error: jobs still running after --timeout 5\n")
    assert not run.ok and "still running" in run.error
    assert run.jobs["a"].batch_changes == 1 and run.s_per_step == {"a": 0.02}
    assert makespan_s(run.jobs) is None
    crashed = parse_live(2, "", "Traceback...\nRuntimeError: boom\n")
    assert not crashed.ok and crashed.error == "exit 2: RuntimeError: boom"


def test_the_table_puts_live_beside_replay_and_names_a_failure() -> None:
    row = {
        "set": "gang",
        "policy": "fifo",
        "live_ok": False,
        "live_error": "exit 1: x",
        "jobs": {
            "gang": {
                "live": {"restarts": 2, "batch_changes": 0, "jct_s": None},
                "replay": {"restarts": 0, "batch_changes": 0, "jct_s": 4.0},
            }
        },
        "makespan_s": {"live": None, "replay": 4.0},
    }
    lines = table([row]).splitlines()
    assert (
        lines[2]
        == "| gang | fifo (live failed: exit 1: x) | gang | 2 / 0 | 0 / 0 | - / 4.0 | - / 4.0 |"
    )


def test_arguments_name_known_sets_and_policies_only() -> None:
    args = parse_args(["--sets", "gang", "--policies", "fifo,tiresias", "--json"])
    assert (args.sets, args.policies, args.json) == (["gang"], ["fifo", "tiresias"], True)
    assert parse_args([]).policies == policy_names()
    for bad in (
        ["--sets", "huge"],
        ["--policies", "fifo,nope"],
        ["--timeout", "0"],
        ["--start-s", "nan"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2


def test_replay_from_recomputes_the_replay_of_recorded_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = {"restarts": 9, "batch_changes": 9, "jct_s": 99.0, "status": "Succeeded"}
    live = {"restarts": 0, "batch_changes": 0, "jct_s": 7.0, "status": "Succeeded"}
    row = {
        "set": "gang",
        "nodes": "2x4",
        "policy": "fifo",
        "start_s": 1.0,
        "live_ok": True,
        "live_error": "",
        "s_per_step": {"gang": 0.01, "s1": 0.01, "s2": 0.01},
        "jobs": {n: {"live": live, "replay": stale} for n in ("gang", "s1", "s2")},
        "makespan_s": {"live": 7.0, "replay": 99.0},
    }
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    assert main(["--replay-from", str(rows), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["jobs"]["gang"]["live"] == live
    assert got["jobs"]["gang"]["replay"]["jct_s"] == pytest.approx(5.0, abs=0.01)
    assert got["makespan_s"] == {"live": 7.0, "replay": pytest.approx(21.0, abs=0.01)}


def test_replay_from_a_file_that_is_not_rows_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for text in ("not json\n", '{"set": "gang"}\n'):
        rows = tmp_path / "rows.jsonl"
        rows.write_text(text)
        with pytest.raises(SystemExit) as exc:
            main(["--replay-from", str(rows)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not this bench's --json rows" in err
    with pytest.raises(SystemExit) as exc:
        main(["--replay-from", str(tmp_path / "missing.jsonl")])
    assert exc.value.code == 2
