"""The torch.distributed side of a job: the process group, DDP, and the gradient
norms `gradstats` needs, taken where they cost nothing extra.

Called by `driver.Session`. With several replicas, a DDP communication hook sees
each gradient bucket just before its all-reduce (the local gradient g_i) and just
after (the averaged g), so |g_i|^2 and |g|^2 come from the buffers DDP moves anyway;
only the mean of |g_i|^2 over replicas needs communicating, and the session folds it
into its one per-step all-reduce. With one replica, `backward_in_halves` takes the
gradients of the two halves of the batch (two backward passes through one graph).
"""

# No `from __future__ import annotations` here: DDP's register_comm_hook compares the
# hook's annotations with dist.GradBucket and Future[Tensor] as objects, not strings.
import ctypes
import datetime
import logging
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket  # torch.distributed re-exports it untyped
from torch.nn.parallel import DistributedDataParallel

from gpuflow.train.commslot import SlotGate
from gpuflow.train.placement import Placement

log = logging.getLogger(__name__)

# How long a rank waits for the others at init and in a collective before failing;
# torch's default is 30 min, far longer than a pod's grace period, so a gang with a
# dead member would otherwise hang until the operator's SIGKILL.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    backend: str | None  # None: a single process, no process group


def start(placement: Placement) -> Runtime:
    """Join the gang: nccl with CUDA (one process per GPU, LOCAL_RANK picks it), gloo
    on CPU; no process group for a gang of one."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", placement.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if placement.world_size == 1:
        return Runtime(device=device, backend=None)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{placement.master_addr}:{placement.master_port}",
        rank=placement.rank,
        world_size=placement.world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )
    log.info("rank %d of %d joined (%s)", placement.rank, placement.world_size, backend)
    return Runtime(device=device, backend=backend)


def stop(runtime: Runtime, model: torch.nn.Module) -> None:
    """Leave the gang, leaving the DDP `model` (and the process group it holds) to the
    operating system at exit.

    ProcessGroupGloo's destructor joins its worker threads while the caller holds the
    GIL, and a worker that is still releasing a tensor whose Python object it came to
    own (the last all-reduce's input) waits for the GIL: a deadlock. Under load this
    hung one rank in three at interpreter exit, after the checkpoint was written
    (py-spy: ~ProcessGroupGloo in std::thread::join, a gloo worker in
    gil_scoped_acquire). destroy_process_group() does not join the threads; only the
    destructor does, and the DDP reducer holds the last reference. So that reference
    is kept (one extra count on the DDP wrapper) and never released; the threads end
    with the process. A process that opens many sessions keeps each one's model.
    """
    if runtime.backend is not None and dist.is_initialized():
        dist.destroy_process_group()
        if isinstance(model, DistributedDataParallel):
            _RETAINED.append(model)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(model))


# Retained DDP wrappers, for anyone debugging; the extra count above is what keeps
# them alive through interpreter shutdown (module globals are cleared then).
_RETAINED: list[DistributedDataParallel] = []


@dataclass
class NormState:
    """Squared norms the hook collects over one step's buckets, and the gate that
    holds the step's first bucket to the job's comm slot (commslot.py)."""

    world_size: int
    gate: SlotGate = field(default_factory=SlotGate)
    local: list[torch.Tensor] = field(default_factory=list)
    averaged: list[torch.Tensor] = field(default_factory=list)

    def take(self) -> tuple[float, float] | None:
        """(|g_i|^2, |g|^2) of the last backward, and reset; None when no bucket
        was reduced (no backward, or a no_sync accumulation step)."""
        if not self.local or len(self.averaged) != len(self.local):
            self.local.clear()
            self.averaged.clear()
            return None
        local = float(torch.stack(self.local).sum())
        averaged = float(torch.stack(self.averaged).sum())
        self.local.clear()
        self.averaged.clear()
        return local, averaged


def _norm_hook(state: NormState, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (divide by world, sum), recording the bucket's squared
    norm before and after; the step's first bucket waits for the comm slot, if any."""
    if not state.local:
        state.gate.wait()
    buf = bucket.buffer()
    state.local.append(buf.detach().pow(2).sum())
    buf.div_(state.world_size)
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def after(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        out = f.value()[0]
        state.averaged.append(out.detach().pow(2).sum())
        return out

    chained: torch.futures.Future[torch.Tensor] = fut.then(after)
    return chained


def wrap(
    model: torch.nn.Module, runtime: Runtime, world_size: int
) -> tuple[torch.nn.Module, NormState | None]:
    """The model to train with (DDP over the gang, or the module itself alone) and
    the norms its hook fills."""
    if runtime.backend is None:
        return model, None
    ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)
    state = NormState(world_size=world_size)
    ddp.register_comm_hook(state, _norm_hook)
    return ddp, state


def _sqr_norm(grads: list[torch.Tensor]) -> float:
    return float(sum((g.detach().pow(2).sum() for g in grads), torch.tensor(0.0)))


def backward_in_halves(
    losses: torch.Tensor, params: list[torch.nn.Parameter]
) -> tuple[float, float]:
    """Backward of `losses.mean()` for a vector of per-sample losses, taken as the
    weighted sum of its two halves' gradients g_1 and g_2. Sets each parameter's .grad
    as `losses.mean().backward()` would (accumulating) and returns the inputs of
    `gradstats.estimate` with R = 2: ((|g_1|^2 + |g_2|^2) / 2, |(g_1 + g_2) / 2|^2).
    The statistics treat both halves as n/2 samples: exact for an even batch."""
    n = losses.shape[0]
    half = n // 2
    first = losses[:half].mean()
    second = losses[half:].mean()
    trainable = [p for p in params if p.requires_grad]
    g1 = torch.autograd.grad(first, trainable, retain_graph=True, allow_unused=True)
    g2 = torch.autograd.grad(second, trainable, allow_unused=True)
    w1, w2 = half / n, (n - half) / n  # the full mean's weights, exact for odd n too
    full: list[torch.Tensor] = []
    halves_1: list[torch.Tensor] = []
    halves_2: list[torch.Tensor] = []
    for p, a, b in zip(trainable, g1, g2, strict=True):
        a = torch.zeros_like(p) if a is None else a
        b = torch.zeros_like(p) if b is None else b
        g = w1 * a + w2 * b
        p.grad = g.clone() if p.grad is None else p.grad + g
        full.append((a + b) / 2)
        halves_1.append(a)
        halves_2.append(b)
    local = (_sqr_norm(halves_1) + _sqr_norm(halves_2)) / 2
    return local, _sqr_norm(full)
