"""bench/gpu_check.py without a GPU: the fake NVML's H200, the example job stopped and
resumed on the CPU, the H200 session's pairs beside `gpuflow colocate`, and the
sharing worker's pair protocol on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import pytest

from bench.gpu_check import (
    FAKE_PRODUCT,
    RECORDED_SOURCE,
    Sharing,
    main,
    measured_rows,
    parse_args,
    table,
)
from controller.model.gpus import GPU_CATALOG
from gpuflow.colocate_cmd import predict
from gpuflow.train.preemption import EXIT_CHECKPOINTED


def test_the_fake_h200_check_publishes_trains_resumes_and_compares(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--fake-nvml", "--json", "--train-steps", "5", "--resume-steps", "7"]
    args += ["--models", "resnet50,mlp"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)

    ann = report["discovery"]["annotation"]
    h200 = GPU_CATALOG.find(FAKE_PRODUCT)
    assert h200 is not None
    assert (ann["model"], ann["product"]) == (h200.name, FAKE_PRODUCT)
    assert ann["speed"] == h200.gpu_type().speed
    assert report["discovery"]["nvml_mem_mib"] == 143_771  # the fake's, as the H200's NVML
    assert ann["memMib"] == 143_771  # what NVML measures, not the catalogue's 144,384
    assert len(ann["gpus"]) == 8 and report["discovery"]["unknown"] is None
    assert report["discovery"]["nvml"].startswith("fake")

    train = report["train"]
    assert train["device"] == "cpu" and train["ok"]
    assert train["stop_exit"] == EXIT_CHECKPOINTED
    assert train["checkpoint_step"] >= train["stop_requested_after_step"] >= 5
    assert train["resumed_at"] == train["checkpoint_step"]
    assert (train["resume_exit"], train["final_step"]) == (0, train["checkpoint_step"] + 7)
    assert train["resumed_loss"] < train["first_loss"]

    rows = report["colocation"]
    assert report["colocation_mode"].startswith("recorded")
    assert [(r["sharing"], r["model"]) for r in rows] == [
        ("time-slicing", "resnet50"),
        ("time-slicing", "mlp"),
        ("mps", "resnet50"),
        ("mps", "mlp"),
    ]
    for r in rows:
        assert r["source"] == f"recorded on H200 ({RECORDED_SOURCE})"
        assert len(r["measured"]) == 2
        mean = sum(r["measured"]) / 2
        assert abs(r["predicted"] / mean - 1) < 0.10, r
    ts_resnet = predict(FAKE_PRODUCT, "time-slicing", ["resnet50:util=0.9928:mem=16210"] * 2, None)
    assert rows[0]["predicted"] == ts_resnet.out["jobs"][0]["slowdown"]
    assert rows[0]["measured"] == [2.223, 2.223]  # 23.526 it/s alone, 10.583 and 10.585

    text = table(report)
    assert "discover   model                  H200-SXM-141GB" in text
    assert "cpu (no CUDA: the CPU run)" in text
    assert f"exit {EXIT_CHECKPOINTED}, checkpoint at step {train['checkpoint_step']}" in text
    row = "time-slicing  resnet50     0.993     2.213   2.223, 2.223   -0.4%       -       -  "
    row += "recorded on H200"
    assert row in text


def test_without_nvml_the_check_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: NVML: ") and err.count("\n") == 1


def test_measured_rows_time_a_pair_and_skip_mps_with_its_reason(tmp_path: Path) -> None:
    # On the CPU, as the check never does by itself: the workers, their barrier and
    # the rows are those of a GPU run; no MPS control daemon here, so its row says so.
    options = parse_args(["--models", "mlp", "--window-s", "0.3"])
    windows: list[int] = []

    class Recording(Sharing):
        def in_window(self) -> None:
            windows.append(len(list(tmp_path.glob("barrier-*/ready-*"))))

    with patch("bench.gpu_check.Sharing", Recording):
        rows = measured_rows(FAKE_PRODUCT, options, tmp_path)
    assert windows == [1, 3]  # called once a run's workers were all in their window
    ts, mps = rows
    assert (ts["sharing"], ts["model"], len(ts["measured"])) == ("time-slicing", "mlp", 2)
    assert all(s > 0 for s in ts["measured"]) and ts["predicted"] >= 1.0
    assert ts["source"].startswith("measured here (")
    assert ts["source"].endswith("; no NVML figure: util the catalogue's)")
    assert ts["agent_util"] is None and ts["predicted_agent"] is None  # no NVML here
    assert mps["sharing"] == "mps" and mps["measured"] == []
    assert mps["source"].startswith("skipped: MPS: ")  # here: nvidia-cuda-mps-control -d failed
