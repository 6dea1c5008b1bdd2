"""A throughput matrix: a job type's steps per second on each GPU type and count,
alone and beside another job on the same GPUs, in Gavel's JSON format.

Gavel (Narayanan et al., OSDI 2020, §3.1) plans with a matrix T whose entry T[m][j] is
the throughput of job m on accelerator type j, measured per job type and scale factor
(GPUs), alone and paired with each other job type for space sharing. Its file
(scheduler/simulation_throughputs.json) maps each GPU key (`v100`, `p100`, `k80`, and
`<key>_unconsolidated` for a job spread over servers) to keys
`"('<job type>', <GPUs>)"`, each holding `"null"`: the steps per second alone, and one
key per partner job type: `[own, partner]` when the two share the GPUs. Gavel writes
0.0 for a combination it did not run; those are left out here.

A job type such as `ResNet-18 (batch size 128)` is a model and a batch
(controller.traces.formats.gavel.parse_job_type reads trace rows the same way); a job finds its
row by its spec's model as written (`ResNet-18`, case and spaces aside) or, for a job
named by the catalogue's model, by Gavel's name for it
(`controller.model.perf.throughputs.GAVEL_MODELS`), and by its batch: the one measured
nearest it in ratio (the smaller on a tie; none asked: the first). GPU keys become
catalogue names (`GAVEL_GPUS`, `gpu_key`), so nodes named as NVML names them find the
same rows.

A job on GPUs of several types runs at its slowest type's rate (Gavel §3.1: a
distributed job's throughput is bounded by its slowest worker), on GPUs of one server
at the consolidated rate, over servers at the unconsolidated rate where one was
measured (else the consolidated one).

Loaded by `gpuflow replay/compare --throughputs FILE` (gpuflow/replay_cmd.py), read by
controller.rates.RateModel (the simulator's speeds) and, through the snapshot's
`type_rates`, by the Gavel policies (policies/gavel/__init__.py); `ModelTypeRates` is those
speeds from the performance model where a backend hands the policies none.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from controller.model.allocation import Allocation
from controller.model.catalog import resolve
from controller.model.cluster import Cluster
from controller.model.job import JobSpec
from controller.model.perf import throughput_ips
from controller.model.perf.throughputs import GAVEL_GPUS, GAVEL_MODELS, gpu_key

UNCONSOLIDATED = "_unconsolidated"

_KEY = re.compile(r"\('(?P<job>.+)', (?P<gpus>\d+)\)")
_JOB_TYPE = re.compile(r"(?P<name>.+?)(?: \(batch size (?P<batch>\d+)\))?")
# The catalogue's model -> Gavel's job-type name (the inverse of GAVEL_MODELS).
_GAVEL_NAMES = {model: name for name, model in GAVEL_MODELS.items()}


class MatrixError(ValueError):
    """A throughput file that is not Gavel's format: one line naming where."""


@dataclass(frozen=True, slots=True)
class JobType:
    """A row of the matrix: a model (lower case, as written) and its batch (None: none
    named, as Gavel's A3C and CycleGAN)."""

    model: str
    batch: int | None

    @classmethod
    def parse(cls, text: str) -> JobType:
        match = _JOB_TYPE.fullmatch(text.strip())
        assert match is not None  # the pattern matches any non-empty text
        batch = int(match["batch"]) if match["batch"] else None
        return cls(_model_key(match["name"]), batch)


def _model_key(name: str) -> str:
    return " ".join(name.lower().split())


@dataclass(frozen=True, slots=True)
class _Cell:
    """Where one job type's rates are kept: GPU type, GPUs, consolidated or not."""

    gpu: str
    gpus: int
    consolidated: bool


class ThroughputMatrix:
    """Steps per second by job type, GPU type and count, alone and in pairs."""

    def __init__(
        self,
        solo: dict[tuple[JobType, _Cell], float],
        pairs: dict[tuple[JobType, JobType, _Cell], tuple[float, float]],
        source: str,
    ) -> None:
        self._solo = solo
        self._pairs = pairs
        self.source = source
        self._batches: dict[str, list[int | None]] = {}
        for job_type, _ in solo:
            batches = self._batches.setdefault(job_type.model, [])
            if job_type.batch not in batches:
                batches.append(job_type.batch)
        self.gpu_types = frozenset(cell.gpu for _, cell in solo)

    def __len__(self) -> int:
        return len(self._solo)

    def job_type(self, model: str, batch: int | None) -> JobType | None:
        """The row for `model` (as written, or the catalogue's name Gavel names
        otherwise) at the batch measured nearest `batch`, or None."""
        for name in (model, _GAVEL_NAMES.get(model, "")):
            batches = self._batches.get(_model_key(name))
            if batches:
                return JobType(_model_key(name), _nearest(batches, batch))
        return None

    def solo_ips(
        self, job_type: JobType, gpu: str, gpus: int, *, consolidated: bool = True
    ) -> float | None:
        """Steps per second of `job_type` alone on `gpus` GPUs named `gpu`; the
        consolidated rate where no unconsolidated one was measured."""
        key = gpu_key(gpu)
        if not consolidated:
            rate = self._solo.get((job_type, _Cell(key, gpus, False)))
            if rate is not None:
                return rate
        return self._solo.get((job_type, _Cell(key, gpus, True)))

    def pair_ips(
        self, job_type: JobType, other: JobType, gpu: str, gpus: int
    ) -> tuple[float, float] | None:
        """Steps per second of `job_type` and of `other` sharing `gpus` GPUs named `gpu`
        (Gavel's space-sharing entries), or None where the pair was not measured."""
        return self._pairs.get((job_type, other, _Cell(gpu_key(gpu), gpus, True)))

    def rate_ips(
        self, spec: JobSpec, gpus: Iterable[str], num_gpus: int, *, consolidated: bool
    ) -> float | None:
        """Steps per second of the job on `num_gpus` GPUs of the types `gpus`: its
        slowest type's rate (module docstring); None where any type lacks a row."""
        job_type = self.job_type(spec.model, spec.batch_size)
        if job_type is None:
            return None
        rates = [self.solo_ips(job_type, gpu, num_gpus, consolidated=consolidated) for gpu in gpus]
        if not rates or any(r is None for r in rates):
            return None
        return min(r for r in rates if r is not None)


def _nearest(batches: list[int | None], batch: int | None) -> int | None:
    known = [b for b in batches if b is not None]
    if batch is None or batch <= 0 or not known:
        return None if None in batches else batches[0]
    return min(known, key=lambda b: (abs(math.log(b / batch)), b))


def parse_matrix(text: str, source: str) -> ThroughputMatrix:
    """A matrix from the text of a Gavel throughput file (module docstring); GPU keys
    Gavel does not name (`GAVEL_GPUS`) are taken as GPU names. MatrixError names the
    first entry that is not of the format."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MatrixError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise MatrixError(f"{source}: not a mapping of GPU types")
    solo: dict[tuple[JobType, _Cell], float] = {}
    pairs: dict[tuple[JobType, JobType, _Cell], tuple[float, float]] = {}
    for raw_gpu, entries in data.items():
        consolidated = not raw_gpu.endswith(UNCONSOLIDATED)
        base = raw_gpu.removesuffix(UNCONSOLIDATED)
        gpu = gpu_key(GAVEL_GPUS.get(base, base))
        if not isinstance(entries, dict):
            raise MatrixError(f"{source}: {raw_gpu}: not a mapping of job types")
        for key, value in entries.items():
            job_type, gpus = _key(source, raw_gpu, key)
            cell = _Cell(gpu, gpus, consolidated)
            if not isinstance(value, dict):
                raise MatrixError(f"{source}: {raw_gpu}: {key}: not a mapping")
            for partner, rate in value.items():
                where = f"{source}: {raw_gpu}: {key}: {partner}"
                if partner == "null":
                    alone = _rate(where, rate)
                    if alone > 0.0:
                        solo[job_type, cell] = alone
                    continue
                if not isinstance(rate, list) or len(rate) != 2:
                    raise MatrixError(f"{where}: a pair's rates are [own, partner]")
                own, theirs = (_rate(where, r) for r in rate)
                other, other_gpus = _key(source, raw_gpu, partner)
                if own > 0.0 and theirs > 0.0 and other_gpus == gpus:
                    pairs[job_type, other, cell] = (own, theirs)
    if not solo:
        raise MatrixError(f"{source}: no job type has a rate")
    return ThroughputMatrix(solo, pairs, source)


def _key(source: str, gpu: str, key: str) -> tuple[JobType, int]:
    match = _KEY.fullmatch(key)
    if match is None:
        raise MatrixError(f"{source}: {gpu}: {key!r} is not ('<job type>', <GPUs>)")
    gpus = int(match["gpus"])
    if gpus < 1:
        raise MatrixError(f"{source}: {gpu}: {key!r}: GPUs must be >= 1")
    return JobType.parse(match["job"]), gpus


def _rate(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MatrixError(f"{where}: a rate is a number, not {value!r}")
    rate = float(value)
    if not math.isfinite(rate) or rate < 0.0:
        raise MatrixError(f"{where}: a rate is finite and >= 0, not {value!r}")
    return rate


def load_matrix(path: str | Path) -> ThroughputMatrix:
    """The matrix in a Gavel throughput file, gzip-compressed where its name ends in
    `.gz` (Gavel's file is 1.2 MB, over a Kubernetes ConfigMap's 1 MiB; gzipped, 95 kB:
    the Helm chart mounts it so); MatrixError (one line) when it cannot be read or is
    not of the format."""
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as file:
                text = file.read()
        else:
            text = Path(path).read_text()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    return parse_matrix(text, str(path))


def type_allocation(cluster: Cluster, gpu: str, num_gpus: int) -> Allocation | None:
    """`num_gpus` GPUs of type `gpu` on an empty cluster, on one server where one has
    that many, else over the fewest servers in order; None where the type has fewer."""
    nodes = [(i, n) for i, n in enumerate(cluster.nodes) if n.gpu_type.name == gpu]
    for index, node in sorted(nodes, key=lambda item: (item[1].num_gpus, item[0])):
        if node.num_gpus >= num_gpus:
            return Allocation.whole((index, g) for g in range(num_gpus))
    gpus: list[tuple[int, int]] = []
    for index, node in sorted(nodes, key=lambda item: (-item[1].num_gpus, item[0])):
        gpus.extend((index, g) for g in range(min(node.num_gpus, num_gpus - len(gpus))))
        if len(gpus) == num_gpus:
            return Allocation.whole(gpus)
    return None


class ModelTypeRates:
    """`Snapshot.type_rates` where the backend gives none: the performance model's
    speed of each job on GPUs of one type of an empty cluster (controller.model.perf,
    the catalogue's profile of the job's model)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._rates: dict[tuple[str, int | None, str, int], float | None] = {}

    def type_rate_ips(self, spec: JobSpec, gpu: str, num_gpus: int) -> float | None:
        key = (spec.model, spec.batch_size, gpu, num_gpus)
        if key not in self._rates:
            alloc = type_allocation(self.cluster, gpu, num_gpus)
            self._rates[key] = (
                None
                if alloc is None
                else throughput_ips(
                    resolve(spec.model),
                    self.cluster,
                    alloc,
                    batch_size=spec.batch_size,
                    precision=spec.precision,
                )
            )
        return self._rates[key]
