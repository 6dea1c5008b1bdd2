"""The CLI on hostile input: huge or non-finite numbers, deep JSON, FIFOs and devices.

Each ends with exit code 2 and a short message, never a traceback, a hang or a read
that grows without end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.traces import write_canonical
from controller.traces.synthetic import generate
from gpuflow.cli import main

REPO = Path(__file__).resolve().parents[2]
HUGE_INT = "9" * 5000  # over Python's 4300-digit int/str conversion limit
BIG_INT = "9" * 4000  # converts, but no count or seed means it
# Far enough to stop a hang or an endless read, long enough for a slow CI start.
TIMEOUT_S = 60


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    write_canonical(path, generate(10, seed=5, cluster_gpus=16, load=1.2))
    return path


def _gpuflow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuflow.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=TIMEOUT_S,
    )


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """argparse's error line for `argv` (it exits 2)."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "generate", "-o", "x.csv", "--jobs", HUGE_INT], "argument --jobs/-n"),
        (["trace", "generate", "-o", "x.csv", "--jobs", BIG_INT], "at most 18 digits"),
        (["trace", "generate", "-o", "x.csv", "--seed", BIG_INT], "argument --seed"),
        (["compare", "t.csv", "--policies", "fifo", "-c", "4x4", "-j", HUGE_INT], "--jobs/-j"),
        (["serve", "--time-scale", "1e309"], "argument --time-scale"),
        (["serve", "--port", HUGE_INT], "argument --port"),
        (["submit", "--gpus", HUGE_INT, "--duration", "5"], "argument --gpus/-g"),
        (["submit", "--gpus", "1", "--duration", "-inf"], "argument --duration"),
        (["jobs", "--limit", BIG_INT], "argument --limit"),
    ],
)
def test_a_number_option_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    line = _usage_error(capsys, argv)
    assert message in line
    assert len(line) < 300  # the huge number is not echoed back


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trace", "generate", "-o", "x.csv", "--load", "1e309"], "--load must be a finite"),
        (["trace", "generate", "-o", "x.csv", "--load", HUGE_INT], "--load must be a finite"),
        (["replay", "t.csv", "-p", "fifo", "-c", "4x4", "--interval", "1e309"], "--interval"),
        (["replay", "t.csv", "-p", "fifo", "-c", "4x4", "--max-time", HUGE_INT], "--max-time"),
    ],
)
def test_an_infinite_float_option_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuflow: error: ") and message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (HUGE_INT, "more than 18 digits"),
    ],
)
def test_a_policy_option_json_value_out_of_range_is_one_line(
    trace: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    argv = ["replay", str(trace), "-p", "tiresias", "-c", "4x4", "--policy-opt", f"k={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuflow: error: --policy-opt k: ") and message in err
    assert err.count("\n") == 1 and len(err) < 300


def test_a_deeply_nested_json_trace_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["trace", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"gpuflow: error: {path}:1: bad JSON: nested too deeply\n"


@pytest.mark.parametrize("fmt", [None, "gpuflow", "philly-json"])
def test_a_fifo_trace_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, fmt: str | None
) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    extra = [] if fmt is None else ["--format", fmt]
    proc = _gpuflow("trace", "validate", str(fifo), *extra)
    assert proc.returncode == 2
    assert proc.stderr == f"gpuflow: error: {fifo}: not a regular file\n"


def test_dev_zero_as_a_trace_is_refused_without_reading_it() -> None:
    proc = _gpuflow("replay", "/dev/zero", "--format", "gpuflow", "-p", "fifo", "-c", "4x4")
    assert proc.returncode == 2
    assert proc.stderr == "gpuflow: error: /dev/zero: not a regular file\n"


@pytest.mark.parametrize("option", ["--cluster", "--failures"])
def test_a_fifo_cluster_or_failures_file_is_refused(
    tmp_path: Path, trace: Path, option: str
) -> None:
    fifo = tmp_path / "spec"
    os.mkfifo(fifo)
    args = ["replay", str(trace), "-p", "fifo", "-c", "4x4", option, str(fifo)]
    proc = _gpuflow(*args)
    assert proc.returncode == 2
    assert proc.stderr == f"gpuflow: error: {option} {fifo}: not a regular file\n"
