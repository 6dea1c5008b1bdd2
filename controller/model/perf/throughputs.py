"""Measured throughputs: a model's steps per second on a GPU type, in a precision.

The performance model (controller.model.perf) asks `THROUGHPUTS.rate` for the
measured speed of a job's model on each GPU type it holds, and falls back to the
GPU's scalar speed (times `controller.model.precision.precision_ratio`) where the
table has none. Keyed by (catalogue model, GPU type, precision, GPUs); a GPU type is
the GPU catalogue's name where the catalogue knows it (so NVML's names find the same
rows), else the name as written, normalised.

What `THROUGHPUTS` holds, shipped in controller/model/profiles/:

- `h200-sharing/measurements.csv`, its `solo` rows: one NVIDIA H200, PyTorch 2.11
  (the folder's README). Only ResNet-50 is a catalogue model as measured (torchvision
  `resnet50` on 224x224 images, as `resnet50` in controller.model.catalog.entries);
  ResNet-18 was measured on 224x224 images where the catalogue's (`cifar10`, the
  alias `resnet18`) is Pollux's CIFAR-10 network on 32x32, the Transformer on
  128-token sequences of an encoder alone where the catalogue's `transformer` is the
  translation model on sentences, and the MLP is in no catalogue: those rows are not
  loaded, so that they cannot stand in for a different job.
- `gavel/throughputs.json`: the single-job entries (`"null"`) of Gavel's measured
  matrix (Narayanan et al., OSDI'20; stanford-futuredata/gavel,
  scheduler/simulation_throughputs.json at c4fa400, MIT License) for V100, P100 and
  K80, 1-8 GPUs of a server (its `*_unconsolidated` and pair entries are left out:
  a whole matrix given with `--throughputs` is read by controller.model.perf.matrix),
  in Gavel's own format, parsed by `parse_gavel`. Gavel's job types map to the
  catalogue model their name resolves to where that is the same network on the same
  data (`GAVEL_MODELS`): ResNet-50 (ImageNet), ResNet-18 (CIFAR-10, the catalogue's
  `cifar10`), Transformer (translation), LM (an LSTM language model), A3C and
  CycleGAN. Not Recommendation: Gavel's is an autoencoder on ML-20M, and the name
  resolves to `ncf`, a different network. Gavel's workloads train in fp32; a batch is
  as the job type names it (A3C and CycleGAN name none: the profile's local batch).
  Gavel's V100s are SXM2 16 GB parts (AWS p3), its P100s PCIe 16 GB (Azure NCv2), its
  K80s "Tesla K80" as NVML names them (the catalogue's `K80`).

To add a source: a parser that yields `MeasuredRate`s and one entry in `_SOURCES`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from controller.model.gpus import GPU_CATALOG, normalised
from controller.model.precision import Precision, effective

# Gavel's job-type names (without the batch) -> the catalogue model (module docstring).
GAVEL_MODELS = {
    "ResNet-50": "resnet50",
    "ResNet-18": "cifar10",
    "Transformer": "transformer",
    "LM": "lm",
    "A3C": "a3c",
    "CycleGAN": "cyclegan",
}
# Gavel's GPU keys -> GPU names (module docstring).
GAVEL_GPUS = {"v100": "V100-SXM2-16GB", "p100": "P100-PCIE-16GB", "k80": "Tesla K80"}
GAVEL_SOURCE = "Gavel (Narayanan et al., OSDI'20), scheduler/simulation_throughputs.json"
GAVEL_PRECISION = Precision.FP32

# The H200 session's models that are the catalogue's as measured (module docstring).
H200_MODELS = {"resnet50": "resnet50"}
H200_GPU = "NVIDIA H200"
H200_SOURCE = "controller/model/profiles/h200-sharing/measurements.csv (one H200, 2026-11-28)"

_GAVEL_KEY = re.compile(r"\('(?P<job>.+)', (?P<gpus>\d+)\)")
_GAVEL_JOB = re.compile(r"(?P<name>.+?)(?: \(batch size (?P<batch>\d+)\))?")


@dataclass(frozen=True, slots=True)
class MeasuredRate:
    """`iters_per_s` training steps per second of `model` (a catalogue name) on `gpus`
    GPUs of type `gpu`, in `precision`, at `batch` samples per GPU (None: the model
    profile's local batch); `source` says where it was measured."""

    model: str
    gpu: str
    precision: Precision
    gpus: int
    batch: int | None
    iters_per_s: float
    source: str

    def __post_init__(self) -> None:
        if not self.iters_per_s > 0.0:
            raise ValueError(f"{self.model} on {self.gpu}: iters_per_s must be > 0")
        if self.gpus < 1:
            raise ValueError(f"{self.model} on {self.gpu}: gpus must be >= 1")


@cache
def gpu_key(name: str) -> str:
    """The table's name for a GPU type: the catalogue's name, else `name` normalised."""
    spec = GPU_CATALOG.find(name)
    return spec.name if spec is not None else normalised(name)


@cache
def _precision_key(gpu: str, precision: Precision) -> Precision:
    spec = GPU_CATALOG.find(gpu)
    return effective(spec, precision) if spec is not None else precision


class ThroughputTable:
    """Measured rates by (model, GPU type, GPUs), each precision as it runs on the GPU
    (TF32 on a GPU without it is FP32: `controller.model.precision.effective`)."""

    def __init__(self, rates: Iterable[MeasuredRate]) -> None:
        self._rows: dict[tuple[str, str, int], list[MeasuredRate]] = {}
        for r in rates:
            key = (r.model, gpu_key(r.gpu), r.gpus)
            self._rows.setdefault(key, []).append(r)

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._rows.values())

    def __iter__(self) -> Iterator[MeasuredRate]:
        for rows in self._rows.values():
            yield from rows

    def rate(
        self,
        model: str,
        gpu: str,
        precision: Precision | None,
        gpus: int = 1,
        batch: float | None = None,
    ) -> MeasuredRate | None:
        """The measured rate of `model` on `gpus` GPUs named `gpu` in `precision` (None:
        any precision) nearest `batch` per GPU (in ratio; the smaller batch on a tie;
        None: the first measured), or None where nothing was measured."""
        rows = self._rows.get((model, gpu_key(gpu), gpus))
        if not rows:
            return None
        if precision is not None:
            wanted = _precision_key(gpu, Precision(precision))
            rows = [r for r in rows if _precision_key(gpu, r.precision) is wanted]
            if not rows:
                return None
        if batch is None or batch <= 0:
            return rows[0]
        return min(
            rows,
            key=lambda r: (abs(math.log(r.batch / batch)), r.batch) if r.batch else (0.0, 0),
        )


def parse_gavel(text: str, models: dict[str, str], gpus: dict[str, str]) -> list[MeasuredRate]:
    """The single-job entries of a throughput matrix in Gavel's JSON format (module
    docstring) whose job type `models` maps and whose GPU key `gpus` maps."""
    rates = []
    for gpu_key_name, entries in json.loads(text).items():
        gpu = gpus.get(gpu_key_name)
        if gpu is None:
            continue
        for key, value in entries.items():
            match = _GAVEL_KEY.fullmatch(key)
            if match is None:
                raise ValueError(f"{gpu_key_name}: {key!r} is not ('<job type>', <GPUs>)")
            job = _GAVEL_JOB.fullmatch(match["job"])
            model = models.get(job["name"]) if job else None
            alone = value.get("null")
            # Gavel writes 0.0 for a job type it did not run on that many GPUs.
            if job is None or model is None or not alone:
                continue
            batch = int(job["batch"]) if job["batch"] else None
            rates.append(
                MeasuredRate(
                    model,
                    gpu,
                    GAVEL_PRECISION,
                    int(match["gpus"]),
                    batch,
                    float(alone),
                    GAVEL_SOURCE,
                )
            )
    return rates


def parse_h200(text: str) -> list[MeasuredRate]:
    """The `solo` rows of the H200 session's measurements.csv for `H200_MODELS`."""
    rates = []
    for row in csv.DictReader(text.splitlines()):
        model = H200_MODELS.get(row["model"])
        if row["kind"] != "solo" or model is None:
            continue
        rates.append(
            MeasuredRate(
                model,
                H200_GPU,
                Precision(row["precision"]),
                1,
                int(row["batch"]),
                float(row["iters_per_s"]),
                H200_SOURCE,
            )
        )
    return rates


def _profile_text(*parts: str) -> str:
    return resources.files("controller.model").joinpath("profiles", *parts).read_text()


_SOURCES: tuple[Callable[[], list[MeasuredRate]], ...] = (
    lambda: parse_h200(_profile_text("h200-sharing", "measurements.csv")),
    lambda: parse_gavel(_profile_text("gavel", "throughputs.json"), GAVEL_MODELS, GAVEL_GPUS),
)


@cache
def shipped_throughputs() -> ThroughputTable:
    """The table of every shipped source (module docstring), read once."""
    return ThroughputTable(rate for source in _SOURCES for rate in source())
