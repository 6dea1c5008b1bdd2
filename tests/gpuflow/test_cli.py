"""The command line: JSON contracts, outputs, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from gpuflow.cli import main

HEADLINE = {"policy", "jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilization", "wall_s"}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    write_canonical(path, generate(60, seed=5, cluster_gpus=16, load=1.2))
    return path


def test_replay_json_is_one_object_with_the_contract_keys(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(trace), "--policy", "fifo", "--cluster", "4x4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == HEADLINE
    assert out["policy"] == "fifo" and out["jobs"] == 60
    assert out["avg_jct_s"] > 0 and 0 < out["gpu_utilization"] <= 1


def test_compare_json_is_a_list_in_policy_order(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "cmp"
    args = ["compare", str(trace), "--policies", "srtf,fifo", "--cluster", "4x4", "--json"]
    assert main([*args, "--out", str(out_dir), "--jobs", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["srtf", "fifo"]
    assert all(set(r) == HEADLINE for r in rows)
    # SRTF is the oracle: its average JCT cannot lose to FIFO's on the same trace.
    assert rows[0]["avg_jct_s"] <= rows[1]["avg_jct_s"]
    for name in ("compare.json", "compare_jct_cdf.png", "fifo/summary.json", "srtf/jobs.csv"):
        assert (out_dir / name).is_file(), name


def test_replay_out_writes_summary_csvs_and_plots(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert main(["replay", str(trace), "-p", "srtf", "-c", "4x4", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "srtf" and summary["summary"]["jobs"] == 60
    assert len((out / "jobs.csv").read_text().splitlines()) == 61
    assert (out / "jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failures_schedule_is_applied(trace: Path, tmp_path: Path) -> None:
    failures = tmp_path / "failures.csv"
    failures.write_text("time_s,node,event\n100,node-0,down\n5000,node-0,up\n")
    out = tmp_path / "f"
    assert (
        main(
            [
                "replay",
                str(trace),
                "-p",
                "fifo",
                "-c",
                "4x4",
                "--failures",
                str(failures),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    timeline = (out / "timeline.csv").read_text().splitlines()
    header = timeline[0].split(",")
    totals = {int(float(row.split(",")[header.index("gpus_total")])) for row in timeline[1:]}
    assert 12 in totals and 16 in totals  # a 4-GPU node was down for a while


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ("job_id,submit_s,num_gpus,duration_s\na,0,2,10\nb,5,two,10\n", ":3: field 'num_gpus'"),
        ("job_id,submit_s,num_gpus,duration_s\na,0,2,-4\n", ":2: field 'duration_s'"),
        ("job_id,submit_s,num_gpus\na,0,2\n", "field 'duration_s'"),
    ],
)
def test_a_bad_trace_row_is_one_line_with_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expect: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    assert main(["replay", str(bad), "-p", "fifo", "-c", "4x4", "--format", "gpuflow"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(bad) in err and expect in err


def test_a_bad_cluster_spec_names_line_and_field(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "name: x\nracks:\n  - name: r0\n    nodes:\n      - {type: dgx-a100, count: -1}\n"
    )
    assert main(["replay", str(trace), "-p", "fifo", "-c", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{spec}:5" in err and "count" in err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--policy", "nope", "--cluster", "4x4"], "fifo"),
        (["--policy", "fifo", "--cluster", "4x4", "--format", "nope"], "gpuflow"),
        (["--policy", "fifo", "--cluster", "bogus"], "NODESxGPUS"),
        (["--policy", "fifo", "--cluster", "4x4", "--placement", "nope"], "consolidated"),
    ],
)
def test_unknown_names_list_the_known_ones(
    trace: Path, capsys: pytest.CaptureFixture[str], args: list[str], expect: str
) -> None:
    assert main(["replay", str(trace), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--policy-opt", "starve_limit=abc"], "option 'starve_limit' must be a finite number"),
        (["--policy-opt", "starve_limit=NaN"], "option 'starve_limit' must be a finite number"),
    ],
)
def test_bad_numbers_are_one_line_errors(
    trace: Path, capsys: pytest.CaptureFixture[str], args: list[str], expect: str
) -> None:
    assert main(["replay", str(trace), "-p", "tiresias", "-c", "4x4", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err


def test_missing_file_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "/nonexistent/t.csv", "-p", "fifo", "-c", "4x4"]) == 2
    assert "/nonexistent/t.csv" in capsys.readouterr().err


def test_trace_generate_then_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.csv"
    assert (
        main(["trace", "generate", "-n", "500", "--seed", "3", "-c", "16x4", "-o", str(out)]) == 0
    )
    capsys.readouterr()
    assert main(["trace", "validate", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["jobs"] == 500 and info["format"] == "gpuflow"


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_s,num_gpus,duration_s\na,0,0,10\n")
    script = Path(sys.executable).parent / "gpuflow"
    proc = subprocess.run(
        [str(script), "replay", str(bad), "-p", "fifo", "-c", "4x4"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and ":2: field 'num_gpus'" in proc.stderr


def test_policy_options_reach_the_policy_and_trace_fills_gittins_samples(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["compare", str(trace), "--policies", "tiresias,fifo", "-c", "4x4", "--json", "-j", "1"]
    args = [*base, "--policy-opt", "tiresias:service_samples_gpu_s=trace"]
    assert main([*args, "--policy-opt", "tiresias:starve_limit=0"]) == 0
    gittins = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    las = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in gittins] == ["tiresias", "fifo"]
    assert gittins[1] == {**las[1], "wall_s": gittins[1]["wall_s"]}  # FIFO untouched
    assert gittins[0]["avg_jct_s"] != las[0]["avg_jct_s"]  # Gittins ordering changed it


def test_a_bad_policy_option_is_a_one_line_error(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", str(trace), "-p", "tiresias", "-c", "4x4", "--policy-opt", "bogus=1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bogus" in err
    assert main(["replay", str(trace), "-p", "fifo", "-c", "4x4", "--policy-opt", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    args = ["replay", str(trace), "-p", "tiresias", "-c", "4x4", "--policy-opt", "starve_limit=-1"]
    assert main(args) == 2
    assert "starve_limit" in capsys.readouterr().err


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


@pytest.mark.parametrize(
    ("trace_name", "cluster", "jobs"),
    [("tiresias_60.csv", "4x4", 60), ("adaptdl_160.csv", "16x4", 160)],
)
def test_example_traces_replay_end_to_end_under_tiresias_and_gandiva(
    trace_name: str, cluster: str, jobs: int, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", str(EXAMPLES / trace_name), "--policies", "tiresias,gandiva"]
    assert main([*args, "--cluster", cluster, "--json", "-j", "1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["tiresias", "gandiva"]
    for row in rows:
        assert row["jobs"] == jobs and row["avg_jct_s"] > 0
