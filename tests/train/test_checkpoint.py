import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gpuflow.train import checkpoint
from gpuflow.train.checkpoint import TrainState


def _model_and_optimizer(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()  # momentum buffers exist
    return model, opt


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.random()), float(torch.rand(1))


def test_round_trip_restores_model_optimiser_progress_and_rng(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    state = TrainState(
        step=41,
        samples_seen=2624,
        batch_size=64,
        base_batch=32,
        base_lrs=[0.1],
        noise={"sqr_ema": 1.5, "var_ema": 9.0, "updates": 40.0},
        extra={"epoch": 3},
    )
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    checkpoint.save(tmp_path, model, opt, state, attempt=1)
    expected = _draws()

    other, other_opt = _model_and_optimizer(1)
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    loaded = checkpoint.load(tmp_path, other, other_opt, attempt=1, restore_rng=True)
    assert loaded == state
    assert _draws() == expected
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)
    momentum = opt.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(other_opt.state_dict()["state"][0]["momentum_buffer"], momentum)


def test_no_checkpoint_is_none(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    assert checkpoint.load(tmp_path / "none", model, opt, attempt=1, restore_rng=False) is None


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt = _model_and_optimizer(0)
    checkpoint.save(tmp_path, model, opt, TrainState(step=10, base_lrs=[0.1]), attempt=1)

    def broken(obj: object, f: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(tmp_path, model, opt, TrainState(step=20, base_lrs=[0.1]), attempt=1)
    monkeypatch.undo()
    assert [p.name for p in checkpoint.attempt_dir(tmp_path, 1).iterdir()] == [
        checkpoint.CHECKPOINT_FILE
    ]
    loaded = checkpoint.load(tmp_path, model, opt, attempt=1, restore_rng=False)
    assert loaded is not None and loaded.step == 10


def test_another_format_is_refused(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    checkpoint.attempt_dir(tmp_path, 1).mkdir()
    torch.save({"format": 99}, checkpoint.checkpoint_file(tmp_path, 1))
    with pytest.raises(ValueError, match="format 99"):
        checkpoint.load(tmp_path, model, opt, attempt=1, restore_rng=False)


def _save_at(directory: Path, step: int, attempt: int, write_s: float = 0.0) -> None:
    model, opt = _model_and_optimizer(step)
    state = TrainState(step=step, base_lrs=[0.1])
    checkpoint.save(directory, model, opt, state, attempt=attempt, write_s=write_s)


def _step_of(directory: Path, attempt: int) -> int | None:
    model, opt = _model_and_optimizer(0)
    loaded = checkpoint.load(directory, model, opt, attempt=attempt, restore_rng=False)
    return None if loaded is None else loaded.step


def test_a_late_writer_of_an_older_attempt_never_replaces_a_newer_checkpoint(
    tmp_path: Path,
) -> None:
    _save_at(tmp_path, 20, attempt=2)
    _save_at(tmp_path, 30, attempt=3)  # attempt 3 resumed and checkpointed
    newer = checkpoint.checkpoint_file(tmp_path, 3).read_bytes()
    # Attempt 2, still stopping, writes its SIGTERM checkpoint after attempt 3's, at a
    # later step than its own last one: under one shared file it would win.
    _save_at(tmp_path, 25, attempt=2)
    assert checkpoint.checkpoint_file(tmp_path, 3).read_bytes() == newer
    assert _step_of(tmp_path, 4) == 30  # attempt 4 resumes from attempt 3's
    assert checkpoint.newest(tmp_path, 4) == (3, checkpoint.checkpoint_file(tmp_path, 3))


def test_an_attempt_resumes_from_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    _save_at(tmp_path, 20, attempt=2)
    # Attempt 3 died mid-write: its directory holds only a temporary file.
    checkpoint.attempt_dir(tmp_path, 3).mkdir()
    (checkpoint.attempt_dir(tmp_path, 3) / f".{checkpoint.CHECKPOINT_FILE}.x").write_bytes(b"to")
    assert _step_of(tmp_path, 4) == 20
    # A directory of a later attempt than the reader's (another lineage) is not its own.
    _save_at(tmp_path, 90, attempt=7)
    assert _step_of(tmp_path, 4) == 20
    assert _step_of(tmp_path, 7) == 90
    assert _step_of(tmp_path, 1) is None  # attempt 1 may resume from none of them


def test_the_layout_before_attempts_is_attempt_zero(tmp_path: Path) -> None:
    _save_at(tmp_path, 12, attempt=1)
    checkpoint.checkpoint_file(tmp_path, 1).rename(tmp_path / checkpoint.CHECKPOINT_FILE)
    assert checkpoint.newest(tmp_path, 2) == (0, tmp_path / checkpoint.CHECKPOINT_FILE)
    assert _step_of(tmp_path, 2) == 12
    _save_at(tmp_path, 15, attempt=2)
    assert _step_of(tmp_path, 3) == 15


def test_prune_removes_earlier_attempts_once_this_one_has_written(tmp_path: Path) -> None:
    _save_at(tmp_path, 10, attempt=1)
    _save_at(tmp_path, 20, attempt=2)
    assert checkpoint.prune(tmp_path, 3) == []  # attempt 3 wrote nothing yet: keep all
    _save_at(tmp_path, 30, attempt=3)
    assert checkpoint.prune(tmp_path, 3) == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attempt-3"]
    assert _step_of(tmp_path, 3) == 30


def test_a_slow_write_keeps_the_previous_checkpoint_until_its_rename(tmp_path: Path) -> None:
    _save_at(tmp_path, 10, attempt=1)
    writer = threading.Thread(target=_save_at, args=(tmp_path, 20, 1, 1.0))
    started = time.monotonic()
    writer.start()
    time.sleep(0.4)
    assert writer.is_alive() and _step_of(tmp_path, 1) == 10  # mid-write: the old one
    writer.join()
    assert time.monotonic() - started >= 1.0
    assert _step_of(tmp_path, 1) == 20
