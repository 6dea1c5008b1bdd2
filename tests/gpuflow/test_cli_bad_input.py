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

from controller.spec import MAX_GPUS, MAX_SPEC_BYTES, ClusterSpecError, named_cluster
from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
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


T = ["t.csv", "-p", "fifo", "-c", "4x4"]
GEN = ["trace", "generate", "-o", "x.csv"]
CMP = ["compare", "t.csv", "--policies", "fifo", "-c", "4x4"]
SUBMIT = ["submit", "--gpus", "1", "--duration", "5"]
OP = ["operator", "run"]
AGENT = ["agent", "run"]
SANDBOX = ["sandbox", "run", "job.yaml"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        # counts
        ([*GEN, "--jobs", HUGE_INT], "--jobs/-n"),
        ([*GEN, "--jobs", BIG_INT], "--jobs/-n"),
        ([*GEN, "--jobs", "0"], "--jobs/-n"),
        ([*GEN, "--jobs", "100000000"], "--jobs/-n"),
        ([*GEN, "--seed", BIG_INT], "--seed"),
        ([*GEN, "--seed", "-1"], "--seed"),
        ([*GEN, "--load", "0"], "--load"),
        ([*GEN, "--load", "1e309"], "--load"),
        ([*GEN, "--load", HUGE_INT], "--load"),
        ([*CMP, "-j", HUGE_INT], "--jobs/-j"),
        ([*CMP, "-j", "-1"], "--jobs/-j"),
        ([*CMP, "-j", "100000"], "--jobs/-j"),
        (["submit", "--gpus", HUGE_INT, "--duration", "5"], "--gpus/-g"),
        (["submit", "--gpus", "0", "--duration", "5"], "--gpus/-g"),
        (["submit", "--gpus", "1", "--duration", "-inf"], "--duration"),
        (["submit", "--gpus", "1", "--duration", "0"], "--duration"),
        (["submit", "--gpus", "1", "--iterations", "nan"], "--iterations"),
        ([*SUBMIT, "--priority", HUGE_INT], "--priority"),
        (["jobs", "--limit", BIG_INT], "--limit"),
        (["jobs", "--limit", "0"], "--limit"),
        (["jobs", "--limit", "-5"], "--limit"),
        # replay intervals and clocks
        (["replay", *T, "--interval", "nan"], "--interval"),
        (["replay", *T, "--interval", "-1"], "--interval"),
        (["replay", *T, "--interval", "1e309"], "--interval"),
        (["replay", *T, "--max-time", "0"], "--max-time"),
        (["replay", *T, "--max-time", HUGE_INT], "--max-time"),
        (["replay", *T, "--seed", "-3"], "--seed"),
        ([*CMP, "--interval", "inf"], "--interval"),
        # the service
        (["serve", "--time-scale", "1e309"], "--time-scale"),
        (["serve", "--time-scale", "0"], "--time-scale"),
        (["serve", "--time-scale", "-2"], "--time-scale"),
        (["serve", "--port", HUGE_INT], "--port"),
        (["serve", "--port", "65536"], "--port"),
        (["serve", "--port", "-1"], "--port"),
        # the Kubernetes side: waits and ports
        ([*OP, "--interval", "0"], "--interval"),
        ([*OP, "--interval", "nan"], "--interval"),
        ([*OP, "--interval", "1e12"], "--interval"),
        ([*OP, "--lease-duration", "-1"], "--lease-duration"),
        ([*OP, "--renew-deadline", "inf"], "--renew-deadline"),
        ([*OP, "--retry-period", "0"], "--retry-period"),
        ([*OP, "--metrics-port", "99999"], "--metrics-port"),
        ([*AGENT, "--interval", "-30"], "--interval"),
        ([*AGENT, "--interval", "1e309"], "--interval"),
        ([*AGENT, "--nic-gbps", "0"], "--nic-gbps"),
        ([*AGENT, "--nic-gbps", "nan"], "--nic-gbps"),
        ([*SANDBOX, "--timeout", "0"], "--timeout"),
        ([*SANDBOX, "--timeout", "1e300"], "--timeout"),
        ([*SANDBOX, "--port", "70000"], "--port"),
        (["sandbox", "up", "--port", "-1"], "--port"),
        # coflow
        (["coflow", "fb.txt", "--port-gbps", "0"], "--port-gbps"),
        (["coflow", "fb.txt", "--port-gbps", "inf"], "--port-gbps"),
    ],
)
def test_a_number_option_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    line = _usage_error(capsys, argv)
    assert f"error: argument {option}: " in line
    assert len(line) < 300  # the huge number is not echoed back


def test_an_unknown_precision_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _usage_error(capsys, [*SUBMIT, "--precision", "int8"])
    assert "error: argument --precision: invalid choice: 'int8'" in line
    assert "tf32" in line and "bf16" in line


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


@pytest.mark.parametrize("name", ["spec.yaml", "spec.csv", "spec"])
def test_a_binary_cluster_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * 8)
    assert main(["cluster", str(path)]) == 2
    assert (
        capsys.readouterr().err == f"gpuflow: error: {path}: not UTF-8 text: invalid start byte\n"
    )


def test_a_cluster_file_of_control_characters_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("racks: \x01\x02\n")
    assert main(["cluster", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuflow: error: {path}: not valid YAML: ") and err.count("\n") == 1


def test_an_oversized_cluster_file_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_SPEC_BYTES + 1)  # sparse: no disk, and never read
    assert main(["cluster", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"gpuflow: error: {path}: larger than {MAX_SPEC_BYTES} bytes\n"
    )


@pytest.mark.parametrize("cluster", ["62500x16", "dgx-a100:100000", "125000x8"])
def test_a_near_million_gpu_cluster_is_refused_before_a_replay(
    trace: Path, capsys: pytest.CaptureFixture[str], cluster: str
) -> None:
    assert main(["replay", str(trace), "-p", "fifo", "-c", cluster]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuflow: error: {cluster}: ") and err.count("\n") == 1
    assert f"more than {MAX_GPUS}" in err or "at most 100000 nodes" in err


def test_the_service_resolves_no_cluster_past_the_cap() -> None:
    # What the API's replay and sweep routes call for each cluster name.
    with pytest.raises(ClusterSpecError, match=f"1000000 GPUs in all: more than {MAX_GPUS}"):
        named_cluster("62500x16")
    assert named_cluster("12500x8").num_gpus == MAX_GPUS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*OP, "--policy-opt", "no-equals-sign"], "expected [POLICY:]KEY=VALUE"),
        ([*OP, "--policy-opt", f"k={HUGE_INT}"], "--policy-opt k: "),
        ([*OP, "--policy", "pollux", "--policy-opt", "no_such_option=1"], "no_such_option"),
        ([*OP, "--policy", "pollux", "--policy-opt", "interval_s=soon"], "interval_s"),
    ],
)
def test_a_bad_operator_policy_option_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """The operator's --policy-opt, as replay's: refused before it talks to a cluster
    (a kubeconfig that names none is given, never read for a bad option)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {}}]\n"
    )
    assert main([*argv, "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.startswith("gpuflow: error: ") and err.count("\n") == 1
