import random
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
    checkpoint.save(tmp_path, model, opt, state)
    expected = _draws()

    other, other_opt = _model_and_optimizer(1)
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    loaded = checkpoint.load(tmp_path, other, other_opt, restore_rng=True)
    assert loaded == state
    assert _draws() == expected
    for a, b in zip(model.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)
    momentum = opt.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(other_opt.state_dict()["state"][0]["momentum_buffer"], momentum)


def test_no_checkpoint_is_none(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    assert checkpoint.load(tmp_path / "none", model, opt, restore_rng=False) is None


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt = _model_and_optimizer(0)
    checkpoint.save(tmp_path, model, opt, TrainState(step=10, base_lrs=[0.1]))

    def broken(obj: object, f: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(tmp_path, model, opt, TrainState(step=20, base_lrs=[0.1]))
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.CHECKPOINT_FILE]
    loaded = checkpoint.load(tmp_path, model, opt, restore_rng=False)
    assert loaded is not None and loaded.step == 10


def test_another_format_is_refused(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    torch.save({"format": 99}, checkpoint.checkpoint_file(tmp_path))
    with pytest.raises(ValueError, match="format 99"):
        checkpoint.load(tmp_path, model, opt, restore_rng=False)
