"""The example DLJob (examples/train/dljob.yaml: the MLP through `gpuflow.train`)
renamed and resized, and issue 25's contention sets made of it.

Used by the contention tests (tests/e2e/test_contention.py) and bench/contention.py,
which both feed these manifests to `gpuflow sandbox run`; like the sandbox kubelet's
working directory, the example is read from the repository this package sits in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train" / "dljob.yaml"


@dataclass(frozen=True)
class JobShape:
    """One job of a set: its name, the GPUs it asks, its elastic range (None: rigid)
    and the training steps it runs."""

    name: str
    gpus: int
    steps: int
    elastic: tuple[int, int] | None = None

    @property
    def min_gpus(self) -> int:
        return self.gpus if self.elastic is None else self.elastic[0]

    @property
    def max_gpus(self) -> int:
        return self.gpus if self.elastic is None else self.elastic[1]


@dataclass(frozen=True)
class ContentionSet:
    """Jobs created together on `nodes` (`NODESxGPUS`, as `sandbox run --nodes`)."""

    nodes: str
    jobs: tuple[JobShape, ...]


# Issue 25's sets, 14 GPUs asked of 8 between them. `elastic`: Gandiva's (and
# Pollux's) set, one rigid and two elastic 2-GPU jobs on one 4-GPU node; `gang`:
# Tiresias' set, an 8-GPU gang over two nodes created together with two 1-GPU jobs.
CONTENTION_SETS: dict[str, ContentionSet] = {
    "elastic": ContentionSet(
        "1x4",
        (
            JobShape("rigid", 2, 600),
            JobShape("ela", 2, 600, (1, 4)),
            JobShape("elb", 2, 600, (1, 4)),
        ),
    ),
    "gang": ContentionSet(
        "2x4",
        (JobShape("gang", 8, 400), JobShape("s1", 1, 1500), JobShape("s2", 1, 1500)),
    ),
}


def example_job(shape: JobShape) -> Any:
    """The example's manifest as `shape` (its own checkpoint path and volume claim)."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = shape.name
    spec = body["spec"]
    spec["gpus"] = shape.gpus
    if shape.elastic is not None:
        spec["minGpus"], spec["maxGpus"] = shape.elastic
    spec["checkpoint"]["path"] = f"/checkpoints/{shape.name}"
    pod = spec["template"]["spec"]
    pod["volumes"][0]["persistentVolumeClaim"]["claimName"] = f"{shape.name}-checkpoints"
    command = pod["containers"][0]["command"]
    command[:] = [f"--steps={shape.steps}" if a.startswith("--steps=") else a for a in command]
    return body
