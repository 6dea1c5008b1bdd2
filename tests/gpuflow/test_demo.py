"""`gpuflow demo`, README's main command: every registered policy replays the seeded
trace on 16x4 GPUs and the comparison is written (gpuflow/replay_cmd.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuflow.cli import main
from policies.registry import policy_names


def test_demo_compares_every_policy_and_writes_the_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json"]) == 0
    heads = json.loads(capsys.readouterr().out)
    assert [h["policy"] for h in heads] == policy_names()
    assert all(h["jobs"] == 400 and h["avg_jct_s"] > 0 for h in heads)
    runs = json.loads((out / "compare.json").read_text())["runs"]
    assert [r["policy"] for r in runs] == policy_names()
    for run, head in zip(runs, heads, strict=True):
        assert run["summary"]["avg_jct_s"] == pytest.approx(head["avg_jct_s"])
    for name in ("trace.csv", "compare_jct_cdf.png", "compare_bars.png"):
        assert (out / name).stat().st_size > 0
    for policy in policy_names():
        assert (out / policy / "jobs.csv").is_file()
