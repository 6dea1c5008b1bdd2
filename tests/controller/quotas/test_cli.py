"""`gpuflow replay --queues FILE`: the JSON's queue keys, queues.csv and queues.png, and
a bad queue file as one line with exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from gpuflow.cli import main

HEADLINE = {"policy", "jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilization", "wall_s"}
# generate() names its tenants tenant-0.. with Zipf weights: tenant-0 submits most.
QUEUES = """
queues:
  - {name: first, guarantee: 10, tenants: [tenant-0]}
  - {name: rest, guarantee: 6, weight: 2, tenants: [tenant-1, tenant-2, tenant-3]}
"""


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    write_canonical(path, generate(80, seed=7, cluster_gpus=16, load=2.0))
    return path


@pytest.fixture
def queues(tmp_path: Path) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES)
    return path


def test_replay_json_adds_exactly_the_queue_keys(
    trace: Path, queues: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    args = ["replay", str(trace), "-p", "tiresias", "-c", "4x4", "--queues", str(queues)]
    assert main([*args, "--json", "--out", str(out_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == HEADLINE | {"queues", "queue_fairness_jain"}
    assert set(out["queues"]) == {"first", "rest"}
    for name, guarantee in (("first", 10), ("rest", 6)):
        entry = out["queues"][name]
        assert set(entry) == {"guarantee_gpus", "mean_share_gpus", "avg_jct_s", "reclaims"}
        assert entry["guarantee_gpus"] == guarantee
        assert entry["avg_jct_s"] > 0 and entry["reclaims"] >= 0
    with (out_dir / "queues.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["queue"] for r in rows} == {"first", "rest"}
    # Every round, the queues together hold no more than the cluster's 16 GPUs.
    by_time: dict[str, float] = {}
    for row in rows:
        by_time[row["t_s"]] = by_time.get(row["t_s"], 0.0) + float(row["held_gpus"])
    assert by_time and max(by_time.values()) <= 16
    assert (out_dir / "queues.png").stat().st_size > 0
    summary = json.loads((out_dir / "summary.json").read_text())
    assert "queue_shares" not in summary["params"]
    assert summary["params"]["queues"] == out["queues"]
    rho = summary["params"]["queue_ftf_rho"]
    assert set(rho) == {"first", "rest"}
    for name in rho:
        assert rho[name]["max"] >= rho[name]["mean"] > 0


def test_without_queues_the_json_is_unchanged(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(trace), "-p", "fifo", "-c", "4x4", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == HEADLINE


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("queues:\n  - {name: a, guarantee: 8, limit: 4}\n", ":2: ", "queues[0].limit: 4 is below"),
        ("queues:\n  - name: b\n  - name: a\n    wieght: 1\n", ":4: ", "queues[1].wieght: unknown"),
        ("queues:\n  - name: a\n    guarantee: 8\n    limit: 4\n", ":4: ", "queues[0].limit: 4"),
        ("queues: [", ": ", "file: not YAML at line"),
    ],
)
def test_a_bad_queue_file_is_one_line_and_exit_2(
    trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    where: str,
    message: str,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["replay", str(trace), "-p", "fifo", "-c", "4x4", "--queues", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"gpuflow: error: {bad}{where}{message}"), err


def test_a_directory_given_as_queue_file_is_refused(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(trace), "-p", "fifo", "-c", "4x4", "--queues", str(tmp_path)]) == 2
    assert "--queues" in capsys.readouterr().err


def test_compare_json_carries_the_queue_keys_per_policy(
    trace: Path, queues: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", str(trace), "--policies", "fifo,srtf", "-c", "4x4", "--jobs", "1"]
    assert main([*args, "--queues", str(queues), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["policy"] for o in out] == ["fifo", "srtf"]
    for obj in out:
        assert set(obj) == HEADLINE | {"queues", "queue_fairness_jain"}
        assert set(obj["queues"]) == {"first", "rest"}
