"""`gpuflow colocate`: the measured H200 pairs reproduced from their measured
utilisation and memory, the JSON contract, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.model.sharing import SharingMode
from gpuflow.cli import main
from tests.h200_sharing import PAIRS, Pair

H200 = "NVIDIA H200"  # as nvidia-smi -L printed it in the session measured


def colocate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["colocate", *args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.mode}-{p.model}")
def test_every_measured_row_within_ten_percent(
    capsys: pytest.CaptureFixture[str], pair: Pair
) -> None:
    out = colocate(
        capsys,
        "--gpu",
        H200,
        "--sharing",
        str(pair.mode),
        f"{pair.model}:util={pair.util}:mem={pair.mem_mib}",
        f"{pair.model}:util={pair.beside_util}:mem={pair.beside_mem_mib}",
    )
    assert out["jobs"][0]["slowdown"] == pytest.approx(pair.slowdown, rel=0.10)
    assert out["jobs"][0]["fits_memory"] and out["jobs"][1]["fits_memory"]


def test_the_json_is_exactly_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = colocate(capsys, "--gpu", H200, "--sharing", "mps", "resnet50", "mlp:util=0.064:mem=65")
    assert list(out) == ["gpu", "sharing", "jobs", "throughput_gain"]
    assert out["gpu"] == "H200-SXM-141GB" and out["sharing"] == "mps"
    assert [list(job) for job in out["jobs"]] == [["model", "slowdown", "fits_memory"]] * 2
    assert [job["model"] for job in out["jobs"]] == ["resnet50", "mlp"]
    gain = sum(1 / job["slowdown"] for job in out["jobs"])
    assert out["throughput_gain"] == pytest.approx(gain, abs=1e-3)


def test_mps_gains_over_time_slicing_on_a_saturating_pair(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = ["resnet50:util=0.993:mem=16210"] * 2
    gains = {
        mode: colocate(capsys, "--gpu", H200, "--sharing", str(mode), *jobs)["throughput_gain"]
        for mode in SharingMode
    }
    # Measured: 2 / 2.22 = 0.90 time-sliced, 2 / 1.95 = 1.03 under MPS.
    assert gains[SharingMode.TIME_SLICING] == pytest.approx(0.90, abs=0.02)
    assert gains[SharingMode.MPS] == pytest.approx(1.03, abs=0.05)


def test_one_job_alone_answers_what_an_mps_cap_costs(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--gpu", H200, "--sharing", "mps", "resnet50:util=0.993"]
    capped = colocate(capsys, *args, "--mps-pct", "50")
    assert capped["jobs"][0]["slowdown"] == pytest.approx(1.46, rel=0.01)  # measured (issue 27)
    assert colocate(capsys, *args)["jobs"][0]["slowdown"] == 1.0


def test_memory_is_taken_in_the_order_of_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    out = colocate(
        capsys, "--gpu", "T4-16GB", "--sharing", "mps", "a:mem=10000", "b:mem=8000", "c:mem=6000"
    )
    assert [job["fits_memory"] for job in out["jobs"]] == [True, False, True]


def test_the_table_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["colocate", "--gpu", H200, "--sharing", "time-slicing", "resnet50:batch=128"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("GPU H200-SXM-141GB (144384 MiB), sharing time-slicing\n")
    assert "throughput gain 1.000" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sharing", "mps", "a"], "--gpu: a GPU model is required"),
        (["--gpu", "NVIDIA H100", "--sharing", "mps", "a"], "--gpu: unknown GPU model"),
        (["--gpu", H200, "a"], "--sharing: a mode is required"),
        (["--gpu", H200, "--sharing", "mig", "a"], "--sharing: unknown mode 'mig'"),
        (["--gpu", H200, "--sharing", "mps"], "JOB: at least one job"),
        (["--gpu", H200, "--sharing", "mps", ":util=0.5"], "JOB 1: no model name"),
        (["--gpu", H200, "--sharing", "mps", "a", "b:gpus=2"], "JOB 2: 'gpus=2' is not one of"),
        (["--gpu", H200, "--sharing", "mps", "a:util=0"], "JOB 1 util: must be in (0, 1]"),
        (["--gpu", H200, "--sharing", "mps", "a:util=inf"], "JOB 1 util: must be in (0, 1]"),
        (["--gpu", H200, "--sharing", "mps", "a:batch=1.5"], "JOB 1 batch: not an integer"),
        (["--gpu", H200, "--sharing", "mps", "a:mem=-1"], "JOB 1 mem: must be in 1.."),
        (["--gpu", H200, "--sharing", "mps", "a:mem=1:mem=2"], "JOB 1: mem given twice"),
        (["--gpu", H200, "--sharing", "mps", "--mps-pct", "50", "a", "b"], "--mps-pct: 1 value"),
        (["--gpu", H200, "--sharing", "mps", "--mps-pct", "101", "a"], "--mps-pct 1: must be"),
        (["--gpu", H200, "--sharing", "time-slicing", "--mps-pct", "50", "a"], "--mps-pct:"),
        (["--gpu", H200, "--sharing", "mps", *["a"] * 49], "JOB: at most 48 jobs"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["colocate", *args, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"gpuflow: error: {message}")
