"""One process of bench/gpu_check.py's co-location pairs: trains one model on the GPU
for a timed window and prints one JSON line (model, batch, iters_per_s, util_pct,
peak_mem_mib, mps_pct).

    python -m bench.sharing_worker MODEL BATCH WINDOW_S [--barrier DIR --nproc N]

The method of the H200 session whose pairs calibrate the sharing model
(controller/model/profiles/h200-sharing/README.md), so that the check's figures are
comparable with those rows: synthetic data already on the GPU, SGD with momentum,
`cudnn.benchmark`, TF32 allowed, channels-last for the CNN; WARMUP_STEPS steps, then as
many steps as fit in WINDOW_S, synchronising every SYNC_EVERY steps; with --barrier,
the processes of a pair start their window together (each writes a ready file in DIR
and waits for N of them). `util_pct` is NVML's `utilization.gpu` of the device (the
whole GPU, as the session's `gpu_util_pct`), sampled every UTIL_SAMPLE_S over the
window; `process_sm_util_pct` this process's SM utilisation as the node agent reads a
pod's (its NVML process samples; None where NVML gives none of this process).
Models: `resnet50` (torchvision, when installed), `transformer` (a 6-layer
`nn.TransformerEncoder`, d=512, 8 heads, ff 2048, a 32,000-token embedding and output
layer, sequences of 128), `mlp` (examples/train's student network, launch-bound).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from examples.train.train import IN_FEATURES, student

# The H200 session's method (its README): 15 warm-up steps, a sync every 5.
WARMUP_STEPS = 15
SYNC_EVERY = 5
UTIL_SAMPLE_S = 0.1
# NVML keeps a bounded buffer of per-process samples: read them once a second.
PROCESS_READ_S = 1.0
BARRIER_TIMEOUT_S = 120.0
VOCAB = 32_000
SEQUENCE = 128
MODELS = ("resnet50", "transformer", "mlp")


def build(
    name: str, batch: int, device: torch.device
) -> tuple[nn.Module, Callable[[], torch.Tensor]]:
    """Model `name` on `device`, and a closure computing one step's loss on its
    synthetic batch."""
    if name == "resnet50":
        import torchvision  # optional: only for this model

        cnn = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
        images = torch.randn(batch, 3, 224, 224, device=device)
        images = images.to(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (batch,), device=device)
        ce = nn.CrossEntropyLoss()
        return cnn, lambda: ce(cnn(images), labels)
    if name == "transformer":
        layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        net = nn.Sequential(
            nn.Embedding(VOCAB, 512), nn.TransformerEncoder(layer, 6), nn.Linear(512, VOCAB)
        ).to(device)
        tokens = torch.randint(0, VOCAB, (batch, SEQUENCE), device=device)
        ce = nn.CrossEntropyLoss()
        return net, lambda: ce(net(tokens).view(-1, VOCAB), tokens.view(-1))
    if name == "mlp":
        mlp = student().to(device)
        x = torch.randn(batch, IN_FEATURES, device=device)
        y = torch.randn(batch, 1, device=device)
        return mlp, lambda: (mlp(x) - y).pow(2).mean()
    raise SystemExit(f"MODEL: unknown model {name!r} (known: {', '.join(MODELS)})")


class UtilSampler:
    """In a thread over the window, from NVML (nothing without it): the GPU's
    utilization.gpu every UTIL_SAMPLE_S, and this process's SM utilisation as the node
    agent measures a pod's (operators/agent/gpu_use.py: the mean `smUtil` of its
    nvmlDeviceGetProcessUtilization samples), read every PROCESS_READ_S."""

    def __init__(self, index: int) -> None:
        self.samples: list[int] = []
        self.process_sm: list[float] = []
        self._index = index
        self._seen_us = int(time.time() * 1e6)  # NVML stamps samples in CPU microseconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UtilSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(self._index)
            last_read = time.monotonic()
            while not self._stop.wait(UTIL_SAMPLE_S):
                self.samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                if time.monotonic() - last_read >= PROCESS_READ_S:
                    self._read_process(pynvml, handle)
                    last_read = time.monotonic()
            self._read_process(pynvml, handle)
        finally:
            pynvml.nvmlShutdown()

    def _read_process(self, pynvml: Any, handle: Any) -> None:
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, self._seen_us)
        except pynvml.NVMLError_NotFound:
            return  # no kernel of any process since the last read
        except pynvml.NVMLError:
            return  # NotSupported: the GPU keeps no per-process samples
        for sample in samples:
            self._seen_us = max(self._seen_us, int(sample.timeStamp))
            if int(sample.pid) == os.getpid():
                self.process_sm.append(float(sample.smUtil))

    def mean_pct(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None

    def process_pct(self) -> float | None:
        """This process's mean SM utilisation over the window, as one read of the
        agent's would give it; None where NVML gave no sample of this process (a GPU
        that keeps none, or NVML's pids are not this process's: a container without
        the host's PID namespace)."""
        return sum(self.process_sm) / len(self.process_sm) if self.process_sm else None


def wait_barrier(directory: Path, nproc: int) -> None:
    (directory / f"ready-{os.getpid()}").touch()
    end = time.monotonic() + BARRIER_TIMEOUT_S
    while sum(1 for p in directory.iterdir() if p.name.startswith("ready-")) < nproc:
        if time.monotonic() > end:
            raise SystemExit(f"--barrier: {nproc} processes not ready in {BARRIER_TIMEOUT_S:g} s")
        time.sleep(0.01)


def measure(
    name: str, batch: int, window_s: float, barrier: Path | None, nproc: int
) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model, loss = build(name, batch, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(WARMUP_STEPS):
        step()
    sync()
    if barrier is not None:
        wait_barrier(barrier, nproc)
    # CUDA_VISIBLE_DEVICES holds the one GPU the check lent this process.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    with UtilSampler(int(visible) if visible.isdigit() else 0) as util:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < window_s:
            step()
            steps += 1
            if steps % SYNC_EVERY == 0:
                sync()
        sync()
        elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    return {
        "model": name,
        "batch": batch,
        "device": str(device),
        "iters_per_s": steps / elapsed,
        "util_pct": util.mean_pct() if cuda else None,
        "process_sm_util_pct": util.process_pct() if cuda else None,
        "peak_mem_mib": round(peak),
        "mps_pct": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("model", choices=MODELS)
    p.add_argument("batch", type=int)
    p.add_argument("window_s", type=float)
    p.add_argument("--barrier", type=Path, help="a directory the pair's processes share")
    p.add_argument("--nproc", type=int, default=1, help="processes to wait for at --barrier")
    args = p.parse_args(argv)
    out = measure(args.model, args.batch, args.window_s, args.barrier, args.nproc)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
