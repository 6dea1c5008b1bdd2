"""`gpuflow colocate --gpu MODEL --sharing time-slicing|mps [--mps-pct N,N...] JOB...
[--json]`: what sharing one GPU would do to a group of jobs, asked before sharing is
turned on.

Registered by gpuflow.cli through `add_parser`; the answer is
`controller.model.sharing.colocate`. Each JOB is `MODEL[:batch=B][:util=U][:mem=MIB]`:
a model of the model catalogue (any other name is the catalogue's generic model), its
per-GPU batch, its GPU utilisation alone on this GPU (0..1], as NVML measures it;
default the catalogue's) and its GPU memory in MiB (default the catalogue's, scaled to
B). One job alone answers what an MPS cap costs it. `--mps-pct` gives each job's
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (default 100), in the order of the jobs.

`--json` prints exactly `{"gpu", "sharing", "jobs": [{"model", "slowdown",
"fits_memory"}], "throughput_gain"}`: `slowdown` is a job's time per step beside the
others over alone, `fits_memory` whether its memory fits beside the jobs before it,
`throughput_gain` the group's summed normalised throughput (1.0: as good as running
them one after the other). Bad input is one line naming the field, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.model.catalog import resolve
from controller.model.catalog.profile import ModelProfile
from controller.model.gpus import GPU_CATALOG
from controller.model.sharing import SharingMode, Tenant, colocate
from controller.spec.yaml_spec import known_gpu
from gpuflow.options import CliError

__all__ = ["Answer", "JobArg", "add_parser", "parse_job", "predict", "run"]

# Memory that does not grow with the batch: weights, gradients and optimizer state,
# 16 bytes a parameter in mixed-precision Adam (Rajbhandari et al., "ZeRO", SC'20
# §3.1: 2 + 2 bytes of fp16 weights and gradients, 12 of fp32 master weights and
# moments); the rest of the catalogue's figure is taken to be activations, which do.
BYTES_PER_PARAMETER = 16
MIB = 2**20
JOB_KEYS = ("batch", "util", "mem")
# More jobs than this on one GPU is a typo: MPS serves at most 48 clients a GPU on
# Volta and later (NVIDIA MPS documentation, "Limitations").
MAX_JOBS = 48
# The largest batch or memory figure taken: 18 digits, as the other commands' counts.
MAX_FIGURE = 10**18


@dataclass(frozen=True)
class JobArg:
    """One JOB argument, parsed: the model as written and the figures given."""

    model: str
    batch: int | None = None
    util: float | None = None
    mem_mib: int | None = None


def add_parser(sub: Any) -> None:
    """Register `colocate` on the CLI's subparsers object."""
    p = sub.add_parser(
        "colocate",
        help="predict what sharing one GPU does to a group of jobs",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("jobs", nargs="*", metavar="JOB", help="MODEL[:batch=B][:util=U][:mem=MIB]")
    p.add_argument("--gpu", help="GPU model: gpuflow's name or NVML's ('NVIDIA H200')")
    p.add_argument("--sharing", help="time-slicing or mps")
    p.add_argument("--mps-pct", help="each job's MPS active-thread percentage, N,N,... (1-100)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    answer = predict(args.gpu, args.sharing, args.jobs, args.mps_pct)
    if args.json:
        sys.stdout.write(json.dumps(answer.out) + "\n")
    else:
        sys.stdout.write(_table(answer.out, answer.tenants, answer.mem_mib))
    return 0


@dataclass(frozen=True)
class Answer:
    """What `colocate` answers: `out`, the `--json` object, and the tenants asked
    about on a GPU of `mem_mib`."""

    out: dict[str, Any]
    tenants: list[Tenant]
    mem_mib: int


def predict(
    gpu_name: str | None, sharing: str | None, job_args: Sequence[str], mps_pct: str | None
) -> Answer:
    """The command's answer for its arguments as written (bench/gpu_check.py asks it
    too); CliError naming the field for bad input."""
    if not gpu_name:
        raise CliError("--gpu: a GPU model is required (e.g. 'NVIDIA H200' or H100-SXM5-80GB)")
    gpu = known_gpu(gpu_name)
    if gpu is None:
        raise CliError(
            f"--gpu: unknown GPU model {gpu_name[:60]!r} (known: "
            f"{', '.join(GPU_CATALOG.by_name)}; or the name nvidia-smi -L prints)"
        )
    mode = _sharing(sharing)
    if not job_args:
        raise CliError("JOB: at least one job, MODEL[:batch=B][:util=U][:mem=MIB]")
    if len(job_args) > MAX_JOBS:
        raise CliError(f"JOB: at most {MAX_JOBS} jobs on one GPU, got {len(job_args)}")
    jobs = [parse_job(text, i) for i, text in enumerate(job_args)]
    fractions = _mps_pct(mps_pct, len(jobs), mode)
    tenants = [
        _tenant(job, resolve(job.model), fraction)
        for job, fraction in zip(jobs, fractions, strict=True)
    ]
    group = colocate(mode, gpu.mem_mib, tenants)
    out = {
        "gpu": gpu.name,
        "sharing": str(mode),
        "jobs": [
            {"model": job.model, "slowdown": round(slow, 4), "fits_memory": fits}
            for job, slow, fits in zip(jobs, group.slowdowns, group.fits_memory, strict=True)
        ],
        "throughput_gain": round(group.throughput_gain, 4),
    }
    return Answer(out, tenants, gpu.mem_mib)


def parse_job(text: str, index: int) -> JobArg:
    """`MODEL[:batch=B][:util=U][:mem=MIB]`; CliError naming the field otherwise."""
    where = f"JOB {index + 1}"
    model, *parts = text.split(":")
    if not model.strip():
        raise CliError(f"{where}: no model name in {text[:60]!r}")
    values: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or key not in JOB_KEYS:
            raise CliError(
                f"{where}: {part[:40]!r} is not one of {', '.join(k + '=' for k in JOB_KEYS)}"
            )
        if key in values:
            raise CliError(f"{where}: {key} given twice")
        values[key] = value
    return JobArg(
        model.strip(),
        batch=_int(values["batch"], f"{where} batch") if "batch" in values else None,
        util=_util(values["util"], f"{where} util") if "util" in values else None,
        mem_mib=_int(values["mem"], f"{where} mem") if "mem" in values else None,
    )


def _sharing(text: str | None) -> SharingMode:
    modes = ", ".join(m.value for m in SharingMode)
    if not text:
        raise CliError(f"--sharing: a mode is required ({modes})")
    try:
        return SharingMode(text)
    except ValueError:
        raise CliError(f"--sharing: unknown mode {text[:40]!r} (known: {modes})") from None


def _mps_pct(text: str | None, jobs: int, mode: SharingMode) -> list[float]:
    """Each job's share of the SMs (1.0 unless --mps-pct caps it)."""
    if text is None:
        return [1.0] * jobs
    if mode is not SharingMode.MPS:
        raise CliError("--mps-pct: thread percentages are MPS's; use --sharing mps")
    items = text.split(",")
    if len(items) != jobs:
        raise CliError(f"--mps-pct: {len(items)} value(s) for {jobs} job(s)")
    out = []
    for i, item in enumerate(items):
        out.append(_int(item, f"--mps-pct {i + 1}", maximum=100) / 100)
    return out


def _int(text: str, field: str, maximum: int = MAX_FIGURE) -> int:
    """A whole number in 1..maximum; at most 18 digits are read (a longer one is a typo)."""
    try:
        value = int(text) if len(text.strip()) <= len(str(MAX_FIGURE)) else None
    except ValueError:
        value = None
    if value is None:
        raise CliError(f"{field}: not an integer of at most 18 digits: {text[:40]!r}")
    if not 1 <= value <= maximum:
        raise CliError(f"{field}: must be in 1..{maximum}, got {value}")
    return value


def _util(text: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"{field}: not a number: {text[:40]!r}") from None
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise CliError(f"{field}: must be in (0, 1], got {text[:40]}")
    return value


def _tenant(job: JobArg, profile: ModelProfile, fraction: float) -> Tenant:
    util = job.util if job.util is not None else profile.gpu_util
    mem = job.mem_mib if job.mem_mib is not None else memory_estimate_mib(profile, job.batch)
    return Tenant(util, mem, fraction)


def memory_estimate_mib(profile: ModelProfile, batch: int | None) -> int:
    """The catalogue's memory figure (at its local batch), its batch-dependent part
    scaled to `batch` (see BYTES_PER_PARAMETER)."""
    if batch is None:
        return profile.mem_mib
    fixed = profile.parameters_m * 1e6 * BYTES_PER_PARAMETER / MIB
    activations = max(0.0, profile.mem_mib - fixed)
    return math.ceil(fixed + activations * batch / profile.local_batch)


def _table(out: dict[str, Any], tenants: list[Tenant], mem_mib: int) -> str:
    lines = [f"GPU {out['gpu']} ({mem_mib} MiB), sharing {out['sharing']}"]
    lines.append(
        f"{'job':<4} {'model':<16} {'util':>5} {'MiB':>8} {'SMs %':>6} {'slowdown':>9}  fits"
    )
    for i, (job, t) in enumerate(zip(out["jobs"], tenants, strict=True)):
        fits = "yes" if job["fits_memory"] else "NO"
        lines.append(
            f"{i + 1:<4} {job['model'][:16]:<16} {t.util:>5.2f} {t.mem_mib:>8} "
            f"{round(t.fraction * 100):>6} {job['slowdown']:>9.3f}  {fits}"
        )
    lines.append(
        f"throughput gain {out['throughput_gain']:.3f} (1.0: as good as one after the other)"
    )
    return "\n".join(lines) + "\n"
