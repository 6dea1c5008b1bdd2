"""The driver a training script uses: placement, DDP, reports, checkpoints, SIGTERM
and batch-size changes, all at step boundaries.

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)      # lr for batch_size
    with gpuflow.train.session(model, opt, batch_size=64) as s:
        for step in s.steps(1000):
            x, y = data(step, s.rank, s.local_batch_size)
            losses = loss_fn(s.model(x), y)                # per-sample losses
            opt.zero_grad()
            s.backward(losses)
            opt.step()
            s.report(loss=losses.mean().item())

At each boundary the ranks make one all-reduce of eight scalars: this rank's |g_i|^2
(gradstats), its loss and whether it reported one, its stop flag (SIGTERM), rank
0's newly read batch size and rank 0's newly read comm slot (commslot: changed,
period, offset); so every rank stops at the same step, adopts the same batch at the
same step and holds its all-reduces to the same slot. Rank 0 alone reports metrics
and writes checkpoints. A gang member's process ends with its session: exit 0 when the
`with` block ends normally, 75 on SIGTERM (checkpointed), so code after the block runs
only in a single-process run.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from types import TracebackType

import torch
import torch.distributed as dist

from gpuflow.train import checkpoint, distributed, gradstats, reporter
from gpuflow.train.batch import BatchWatcher, scaled_lr, split_batch
from gpuflow.train.commslot import CommSlot, SlotWatcher
from gpuflow.train.placement import Placement, read_placement
from gpuflow.train.preemption import EXIT_CHECKPOINTED, StopFlag

log = logging.getLogger(__name__)

# A report every few seconds gives the scheduler a throughput per batch size within
# one scheduling round (the operator's default is 60 s) at a negligible API load.
REPORT_INTERVAL_S = 5.0
# Periodic checkpoints bound the work a SIGKILL loses; a SIGTERM checkpoints anyway.
CHECKPOINT_INTERVAL_S = 300.0


class _Window:
    """What happened since the last report: steps, samples, losses, time."""

    def __init__(self, now: float) -> None:
        self.start = now
        self.steps = 0
        self.samples = 0
        self.loss_sum = 0.0
        self.loss_count = 0


class Session:
    """A job's run: `optimizer`'s learning rates are those for the global
    `batch_size`, which GPUFLOW_BATCH_SIZE, the checkpoint or the podinfo annotation
    may replace (the square-root rule rescales the rates); `epoch_samples`, the size
    of the job's data, makes it report its epoch length; `checkpoint_write_s` makes
    every checkpoint take at least that long to write (a large model's write, to try
    a grace period against). Use it as a context."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        batch_size: int,
        env: Mapping[str, str] | None = None,
        report_interval_s: float = REPORT_INTERVAL_S,
        checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S,
        epoch_samples: int | None = None,
        checkpoint_write_s: float = 0.0,
    ) -> None:
        self.placement: Placement = read_placement(os.environ if env is None else env)
        p = self.placement
        self._stop = StopFlag()
        self._stop.install()
        self._runtime = distributed.start(p)
        self.device = self._runtime.device
        self._module = model.to(self.device)
        self._optimizer = optimizer
        self._report_interval_s = report_interval_s
        self._checkpoint_interval_s = checkpoint_interval_s
        self._checkpoint_write_s = checkpoint_write_s
        self._pruned = False  # the checkpoints of earlier attempts removed
        self._epoch_samples = epoch_samples
        self._lr_factor = 1.0  # the script's schedule on top of the square-root rule
        self.state = self._resume(batch_size)
        self._noise = gradstats.NoiseState.from_dict(self.state.noise)
        self._apply_batch(self.state.batch_size)
        self.model, self._norms = distributed.wrap(self._module, self._runtime, p.world_size)
        lead = p.rank == 0
        self._reporter = reporter.Reporter(p.report if lead else None)
        self._watcher = BatchWatcher(p.annotations_file if lead else None)
        self._slots = SlotWatcher(p.annotations_file if lead else None)
        now = time.monotonic()
        self._window = _Window(now)
        self._last_checkpoint = now
        self._pending_stats: tuple[float, float, int, int] | None = None  # local, global, R, b
        self._loss = 0.0
        self._loss_count = 0
        self._last_loss: float | None = None  # the gang's mean loss at the last step
        self._finished = False

    # -- what the script reads -------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def batch_size(self) -> int:
        """The global batch in use (a multiple of the world size)."""
        return self.state.batch_size

    @property
    def local_batch_size(self) -> int:
        return self.state.batch_size // self.placement.world_size

    @property
    def extra(self) -> dict[str, object]:
        """The script's own state, saved in and restored from the checkpoint."""
        return self.state.extra

    # -- what the script calls -------------------------------------------------------

    def steps(self, total: int) -> Iterator[int]:
        """Step numbers from the resumed one to total - 1; between them, the boundary
        (which may exit with EXIT_CHECKPOINTED). A final checkpoint at the end."""
        while self.state.step < total and not self._finished:
            yield self.state.step
            self.state.step += 1
            self.state.samples_seen += self.state.batch_size
            self._boundary()
        if self._window.steps:
            self._emit(time.monotonic())
        self._save()

    def backward(self, losses: torch.Tensor) -> None:
        """`torch.autograd.backward(losses.mean())`, measuring the gradient statistics on the way:
        through DDP's hook with several replicas, by halves of the batch alone (pass
        per-sample losses for that; a scalar loss gives no statistics)."""
        if self._norms is not None:
            torch.autograd.backward(losses.mean())
            return
        if losses.dim() == 1 and losses.shape[0] >= 2:
            params = list(self._module.parameters())
            local, full = distributed.backward_in_halves(losses, params)
            self._pending_stats = (local, full, 2, losses.shape[0] // 2)
            return
        torch.autograd.backward(losses.mean())

    def report(self, *, loss: float) -> None:
        """This step's loss on this rank (the report carries the mean over ranks)."""
        self._loss += float(loss)
        self._loss_count += 1

    @property
    def last_loss(self) -> float | None:
        """The mean loss over the whole gang at the last step (the same on every rank,
        so that decisions taken on it agree), or None before the first report."""
        return self._last_loss

    def finish(self) -> None:
        """End the run after this step as if the last one were reached (final report
        and checkpoint, exit 0): a job that stops at its own convergence test."""
        self._finished = True

    def decay_lr(self, factor: float) -> None:
        """Multiply the learning rates the batch size gives by `factor` (a schedule of
        the script's; the square-root rule still applies on top of it)."""
        self._lr_factor = factor
        for group, base in zip(self._optimizer.param_groups, self.state.base_lrs, strict=True):
            group["lr"] = scaled_lr(base, self.state.base_batch, self.state.batch_size) * factor

    def request_stop(self) -> None:
        """Stop at the next boundary as SIGTERM would (checkpoint, exit 75)."""
        self._stop.request()

    def close(self) -> None:
        self._stop.uninstall()
        self._reporter.close()
        distributed.stop(self._runtime, self.model)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self._runtime.backend is not None:
            # A gang member that ran to its end (checkpointed and reported) ends its
            # process here with exit 0, as one stopped by SIGTERM does with 75: the
            # interpreter's teardown of gloo's threads aborted a rank after its last
            # step now and then (exit -6; CI's DDP test). Code after the `with` block
            # of a distributed run does not run.
            self._end_process(0)
        self.close()

    def _end_process(self, code: int) -> None:
        """Close the session and leave the process with `code` at once, logs flushed,
        skipping the interpreter's teardown (distributed.stop says why)."""
        self.close()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    # -- boundaries ------------------------------------------------------------------

    def _sync(self) -> tuple[float | None, float | None, bool, int]:
        """One all-reduce: (mean |g_i|^2 or None, mean loss or None, stop, rank 0's
        new batch or 0); rank 0's new comm slot, if it read one, reaches every rank's
        gate on the way (only rank 0 contributes to its three entries)."""
        stats = self._norms.take() if self._norms is not None else None
        polled = self._watcher.poll() or 0
        slot_changed, slot = self._slots.poll()
        vec = torch.tensor(
            [
                stats[0] if stats else 0.0,
                self._loss,
                float(self._loss_count),
                1.0 if self._stop.requested else 0.0,
                float(polled),
                1.0 if slot_changed else 0.0,
                slot.period_s if slot else 0.0,
                slot.offset_s if slot else 0.0,
            ],
            dtype=torch.float64,
        )
        self._loss, self._loss_count = 0.0, 0
        if self._runtime.backend is not None:
            dist.all_reduce(vec)  # gloo and nccl both reduce float64 on their devices
        n = self.placement.world_size
        local_sqr, loss_sum, loss_count, stop, batch, changed, period_s, offset_s = vec.tolist()
        if changed and self._norms is not None:
            adopted = CommSlot(period_s, offset_s) if period_s > 0 else None
            self._norms.gate.slot = adopted
            log.info("comm slot %s", adopted or "none")
        if stats is not None:
            self._pending_stats = (local_sqr / n, stats[1], n, self.local_batch_size)
        loss = loss_sum / loss_count if loss_count else None
        return local_sqr, loss, stop > 0, int(batch)

    def _boundary(self) -> None:
        _, loss, stop, batch = self._sync()
        if self._pending_stats is not None:
            local, full, replicas, b = self._pending_stats
            self._noise = gradstats.smooth(
                self._noise, gradstats.estimate(local, full, replicas, b)
            )
            self._pending_stats = None
        w = self._window
        w.steps += 1
        w.samples += self.state.batch_size
        if loss is not None:
            w.loss_sum += loss
            w.loss_count += 1
            self._last_loss = loss
        now = time.monotonic()
        changed = batch > 0 and split_batch(batch, self.world_size).global_batch != self.batch_size
        if stop or changed or now - w.start >= self._report_interval_s:
            self._emit(now)
        if stop:
            self._save()
            log.info("stopping at step %d on SIGTERM (exit %d)", self.step, EXIT_CHECKPOINTED)
            if self._runtime.backend is not None:
                # A gang member ends here, checkpointed and reported: the interpreter's
                # exit tears down gloo's threads, which hung or aborted a rank now and
                # then (distributed.stop), and the exit code is all the operator reads.
                self._end_process(EXIT_CHECKPOINTED)
            raise SystemExit(EXIT_CHECKPOINTED)
        if changed:
            self._apply_batch(batch)
            self._reporter.add(reporter.BATCH_SIZE, self.batch_size, self.step)
        if now - self._last_checkpoint >= self._checkpoint_interval_s:
            self._save()

    def _emit(self, now: float) -> None:
        """Report the window that ends at this boundary (rank 0's reporter; a no-op
        elsewhere), log its step and loss on every rank, and open the next."""
        w, step = self._window, self.step
        elapsed = max(now - w.start, 1e-9)
        add = self._reporter.add
        if w.loss_count:
            add(reporter.LOSS, w.loss_sum / w.loss_count, step)
        add(reporter.SAMPLES_PER_S, w.samples / elapsed, step)
        add(reporter.STEP_TIME_S, elapsed / w.steps, step)
        add(reporter.BATCH_SIZE, self.batch_size, step)
        add(reporter.GPUS, self.placement.gpus, step)
        if self._epoch_samples:
            add(reporter.EPOCH_STEPS, max(1, self._epoch_samples // self.batch_size), step)
        smoothed = self._noise.smoothed()
        if smoothed is not None:
            add(reporter.GRAD_SQR, smoothed.grad_sqr, step)
            add(reporter.GRAD_VAR, smoothed.grad_var, step)
        if w.loss_count:  # the gang's mean loss, alike on every rank
            log.info("step %d loss %.5f batch %d", step, w.loss_sum / w.loss_count, self.batch_size)
        self._window = _Window(now)

    def _apply_batch(self, requested: int) -> None:
        split = split_batch(requested, self.placement.world_size)
        old = self.state.batch_size
        self.state.batch_size = split.global_batch
        for group, base in zip(self._optimizer.param_groups, self.state.base_lrs, strict=True):
            group["lr"] = scaled_lr(base, self.state.base_batch, split.global_batch)
            group["lr"] *= self._lr_factor
        if old != split.global_batch:
            log.info(
                "batch size %d -> %d (local %d), lr x%.3f (square-root rule)",
                old,
                split.global_batch,
                split.local,
                scaled_lr(1.0, self.state.base_batch, split.global_batch),
            )

    def _resume(self, batch_size: int) -> checkpoint.TrainState:
        p = self.placement
        base_lrs = [float(g["lr"]) for g in self._optimizer.param_groups]
        fresh = checkpoint.TrainState(base_batch=batch_size, base_lrs=base_lrs)
        fresh.batch_size = p.batch_size or batch_size
        if p.checkpoint_path is None:
            if p.resume:
                log.warning("GPUFLOW_RESUME=1 without GPUFLOW_CHECKPOINT_PATH: starting afresh")
            return fresh
        loaded = checkpoint.load(
            p.checkpoint_path,
            self._module,
            self._optimizer,
            attempt=p.attempt,
            restore_rng=p.rank == 0,
        )
        if loaded is None:
            if p.resume:
                log.warning(
                    "GPUFLOW_RESUME=1 but no checkpoint in %s: starting afresh", p.checkpoint_path
                )
            return fresh
        return loaded

    def _save(self) -> None:
        self._last_checkpoint = time.monotonic()
        path = self.placement.checkpoint_path
        if path is None or self.rank != 0:
            return
        self.state.noise = asdict(self._noise)
        attempt = self.placement.attempt
        checkpoint.save(
            path,
            self._module,
            self._optimizer,
            self.state,
            attempt=attempt,
            write_s=self._checkpoint_write_s,
        )
        if not self._pruned:
            self._pruned = True
            removed = checkpoint.prune(path, attempt)
            if removed:
                log.info("removed the checkpoints of attempt(s) %s", removed)


# `with gpuflow.train.session(model, optimizer, batch_size=64) as s:` reads as the
# context it is; the class is the same thing.
session = Session
