"""Example gpuflow job: a 2-layer MLP learns a fixed random teacher network on
synthetic data, with DDP across the gang, through `gpuflow.train.session`.

Run alone:      python -m examples.train.train --steps 300
Run as a gang:  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
                python -m examples.train.train  (and the same with RANK=1)
Under gpuflow the operator sets the env (docs/train.md); dljob.yaml and
dljob-ddp.yaml run it. The data of step s on rank r is drawn from (seed, s, r), so a
resumed run sees the same stream it would have seen without the interruption.
"""

from __future__ import annotations

import argparse
import logging
import time

import torch
from torch import nn

import gpuflow.train

IN_FEATURES = 32
HIDDEN = 64
# The teacher's output noise: the loss floor is its variance, 0.01. More noise makes
# the gradients noisier, so a larger batch pays (Pollux then raises it).
NOISE_STD = 0.1
# Scales the teacher's output so the student starts near loss 0.8 and falls to a few
# hundredths in about 300 steps at the default lr and batch (measured on CPU).
TEACHER_GAIN = 3.0


def teacher(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(IN_FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
    net.requires_grad_(False)
    with torch.no_grad():
        net[2].weight.mul_(TEACHER_GAIN)
        net[2].bias.mul_(TEACHER_GAIN)
    return net


def student(kind: str = "mlp") -> nn.Module:
    if kind == "linear":
        return nn.Linear(IN_FEATURES, 1)
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))


class Convergence:
    """The job's own stopping rule: it has converged once its loss falls by less than
    `delta` an epoch, the slope of a line through its last `epochs` epoch-mean losses
    (Optimus, EuroSys 2018 §3.1, stops jobs by this kind of test and predicts when it
    fires; the mean over several epochs keeps one noisy epoch from ending the job)."""

    def __init__(self, delta: float, epochs: int = 5) -> None:
        self.delta = delta
        self.epochs = epochs
        self.means: list[float] = []
        self._sum = 0.0
        self._count = 0

    def add(self, loss: float, epoch_steps: int) -> bool:
        """Add a step's loss; True once converged."""
        self._sum += loss
        self._count += 1
        if self._count < epoch_steps:
            return False
        self.means.append(self._sum / self._count)
        self._sum, self._count = 0.0, 0
        if len(self.means) < self.epochs:
            return False
        recent = self.means[-self.epochs :]
        mean_x = (self.epochs - 1) / 2
        mean_y = sum(recent) / self.epochs
        slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(recent)) / sum(
            (i - mean_x) ** 2 for i in range(self.epochs)
        )
        return -slope < self.delta


def batch(
    target: nn.Module, seed: int, step: int, rank: int, size: int, noise_std: float = NOISE_STD
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(size, IN_FEATURES, generator=gen)
    y = target(x) + noise_std * torch.randn(size, 1, generator=gen)
    return x, y


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.05, help="SGD lr at --batch-size")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-std", type=float, default=NOISE_STD, help="label noise")
    parser.add_argument("--model", choices=["mlp", "linear"], default="mlp")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument(
        "--lr-decay-steps",
        type=float,
        default=0.0,
        help="lr / (1 + step / this), the schedule under which SGD's loss falls as 1/t "
        "(Optimus's loss model); 0: a constant lr",
    )
    parser.add_argument(
        "--until-converged",
        type=float,
        default=0.0,
        help="stop (exit 0) once the loss falls by less than this an epoch; 0: run --steps",
    )
    parser.add_argument(
        "--epoch-samples", type=int, default=6400, help="samples counted as one epoch"
    )
    parser.add_argument("--report-interval-s", type=float, default=5.0)
    parser.add_argument("--checkpoint-interval-s", type=float, default=300.0)
    parser.add_argument(
        "--checkpoint-write-s",
        type=float,
        default=0.0,
        help="make every checkpoint take at least this long to write, as a large "
        "model's does (to try spec.checkpoint.gracePeriodSeconds against)",
    )
    parser.add_argument(
        "--step-sleep-s", type=float, default=0.0, help="stretch each step (to watch it)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    target = teacher(args.seed)
    torch.manual_seed(args.seed + 1)  # the same initial student on every rank
    model = student(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    converged = Convergence(args.until_converged)
    with gpuflow.train.session(
        model,
        optimizer,
        batch_size=args.batch_size,
        report_interval_s=args.report_interval_s,
        checkpoint_interval_s=args.checkpoint_interval_s,
        checkpoint_write_s=args.checkpoint_write_s,
        epoch_samples=args.epoch_samples,
    ) as s:
        for step in s.steps(args.steps):
            if args.lr_decay_steps:
                s.decay_lr(1.0 / (1.0 + step / args.lr_decay_steps))
            x, y = batch(target, args.seed, step, s.rank, s.local_batch_size, args.noise_std)
            x, y = x.to(s.device), y.to(s.device)
            losses = (s.model(x) - y).pow(2).mean(dim=1)  # per-sample losses
            optimizer.zero_grad()
            s.backward(losses)
            optimizer.step()
            s.report(loss=losses.mean().item())
            epoch_steps = max(1, args.epoch_samples // s.batch_size)
            loss = s.last_loss
            if args.until_converged and loss is not None and converged.add(loss, epoch_steps):
                s.finish()
            if args.step_sleep_s:
                time.sleep(args.step_sleep_s)


if __name__ == "__main__":
    main()
