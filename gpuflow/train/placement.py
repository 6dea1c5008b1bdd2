"""Where this training process stands: the env the operator injects into every worker pod.

Read once by `gpuflow.train.session` (and by scripts that want the values without
torch). The names and meanings are those `operators/pods/__init__.py` `_env` writes; the
reporting triple (API URL, job id, metrics token) is optional: without all three the
job trains and reports nothing. A malformed value is an error naming the variable, so
a bad manifest fails at start rather than mid-run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# The variables that make a process one of a gang; a job run outside gpuflow (no
# RANK) is a gang of one on 127.0.0.1.
_SINGLE = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
# 29500 is torch.distributed's default MASTER_PORT (torchrun --master_port).


class PlacementError(ValueError):
    """A placement variable is present but malformed; the message names it."""


@dataclass(frozen=True)
class ReportTarget:
    """Where metrics go: POST {api_url}/jobs/{job_id}/metrics with X-Job-Token."""

    api_url: str
    job_id: str
    token: str

    @property
    def metrics_url(self) -> str:
        return f"{self.api_url.rstrip('/')}/jobs/{self.job_id}/metrics"


@dataclass(frozen=True)
class Placement:
    """This process's place in its gang. Under torchrun, `rank` and `world_size` are
    torchrun's process ranks (it overwrites RANK and WORLD_SIZE); in a plain
    one-process-per-pod run they are the pod's rank and the number of pods."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    gpus_per_pod: int
    job: str
    attempt: int
    resume: bool
    checkpoint_path: Path | None
    batch_size: int | None
    podinfo_dir: Path | None
    report: ReportTarget | None
    under_torchrun: bool

    @property
    def gpus(self) -> int:
        """The job's allocation in GPUs: torchrun runs one process per GPU; a plain run
        is one process per pod holding `gpus_per_pod` GPUs."""
        return self.world_size if self.under_torchrun else self.world_size * self.gpus_per_pod

    @property
    def annotations_file(self) -> Path | None:
        return None if self.podinfo_dir is None else self.podinfo_dir / "annotations"


def _int(env: Mapping[str, str], name: str, default: str, *, minimum: int) -> int:
    raw = env.get(name, default)
    try:
        value = int(raw)
    except ValueError:
        raise PlacementError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise PlacementError(f"{name}={value} must be >= {minimum}")
    return value


def _report_target(env: Mapping[str, str]) -> ReportTarget | None:
    names = ("GPUFLOW_API_URL", "GPUFLOW_JOB_ID", "GPUFLOW_METRICS_TOKEN")
    values = [env.get(n, "") for n in names]
    if not all(values):
        missing = ", ".join(n for n, v in zip(names, values, strict=True) if not v)
        log.info("metrics reporting off: %s not set", missing)
        return None
    url = values[0]
    if not url.startswith(("http://", "https://")):
        raise PlacementError(f"GPUFLOW_API_URL={url!r} is not an http(s) URL")
    return ReportTarget(api_url=url, job_id=values[1], token=values[2])


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "0")
    if raw not in ("0", "1"):
        raise PlacementError(f"{name}={raw!r} must be '0' or '1'")
    return raw == "1"


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "")
    return Path(raw) if raw else None


def read_placement(env: Mapping[str, str]) -> Placement:
    """The placement from `env` (pass `os.environ`). Raises PlacementError naming the
    first malformed variable."""
    world = _int(env, "WORLD_SIZE", _SINGLE["WORLD_SIZE"], minimum=1)
    rank = _int(env, "RANK", _SINGLE["RANK"], minimum=0)
    if rank >= world:
        raise PlacementError(f"RANK={rank} must be < WORLD_SIZE={world}")
    master = env.get("MASTER_ADDR", _SINGLE["MASTER_ADDR"])
    if not master:
        raise PlacementError("MASTER_ADDR is empty")
    port = _int(env, "MASTER_PORT", _SINGLE["MASTER_PORT"], minimum=1)
    if port > 65535:
        raise PlacementError(f"MASTER_PORT={port} must be <= 65535")
    batch = env.get("GPUFLOW_BATCH_SIZE", "")
    return Placement(
        rank=rank,
        world_size=world,
        local_rank=_int(env, "LOCAL_RANK", "0", minimum=0),
        master_addr=master,
        master_port=port,
        gpus_per_pod=_int(env, "GPUFLOW_GPUS_PER_POD", "1", minimum=1),
        job=env.get("GPUFLOW_JOB", "local"),
        attempt=_int(env, "GPUFLOW_ATTEMPT", "1", minimum=1),
        resume=_flag(env, "GPUFLOW_RESUME"),
        checkpoint_path=_path(env, "GPUFLOW_CHECKPOINT_PATH"),
        batch_size=_int(env, "GPUFLOW_BATCH_SIZE", "", minimum=1) if batch else None,
        podinfo_dir=_path(env, "GPUFLOW_PODINFO_DIR"),
        report=_report_target(env),
        # torchrun sets LOCAL_WORLD_SIZE (and TORCHELASTIC_RUN_ID) in every child.
        under_torchrun="LOCAL_WORLD_SIZE" in env,
    )
