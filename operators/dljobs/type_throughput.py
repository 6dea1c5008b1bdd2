"""Each job's measured speed on each GPU type it has run on: recorded in its DLJob's
`status.typeThroughput` and handed to the policies in place of the model's speed
(issue 31, item 4).

The operator knows each node's GPU type from the node agent's annotation
(operators/nodes.py) and a running job's reported speed from `status.train`
(operators/views.py `measured_of`). Each round `KubeBackend.observe()` asks
`observed()` what the job's reports say of the type it runs on now, and `merged()`
whether that changes its record, which then goes out with the job's next status write
(`Writer.stage`), so that a restarted operator keeps what every job measured. A
report counts for a type only where it is unambiguous: the job on whole GPUs of that
one type (not sharing them, not spread over types, where it runs at its slowest
type's rate), at the size it reported from, the report arriving after its gang
started on those GPUs (a report from before a migration speaks of the old type; the
start is known to the second, START_RESOLUTION_S). It is the last window's steps per
second (`Measured.samples_per_s` over the batch): the per-size mean the API keeps
would average over a migration between types at one size.

`MeasuredTypeRates` is the snapshot's `type_rates` (controller.model.snapshot): the
backend's rate model (controller.rates.RateModel) for a type the job has not run on,
and for one it has, the model's speed scaled by the job's measured ratio to it there,
so that at the GPUs and batch it was measured at the answer is the measurement itself.
Gavel's policies (policies/gavel.py) read it when they compute a round's time
fractions. The API shows the record on the job page (api.cluster_mode.backend, GET /jobs/{id}).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller.model import Allocation, Cluster, JobSpec, JobView
from controller.model.type_throughput import TypeThroughput
from controller.rates import RateModel
from operators.kube.times import micro_time, parse_time

TYPE_THROUGHPUT = "typeThroughput"
# A recorded rate is rewritten when a new report differs from it by more than this
# fraction: a report's window is a few seconds of steps, whose rate moves by a percent
# or two between windows (gpuflow.train's reporter); a status write per report would
# double the API's writes to the DLJob for nothing a policy would decide otherwise.
RECORD_DRIFT = 0.05
# A pod's running `startedAt` has whole seconds (the kubelet's RFC 3339 without
# fractions): the gang may have started up to this much after its record says, and a
# report within it may be the previous attempt's, on other GPUs.
START_RESOLUTION_S = 1.0


def to_status(item: TypeThroughput) -> dict[str, Any]:
    """One entry of `status.typeThroughput` (a live job's record always has a batch)."""
    return {
        "gpuType": item.gpu_type,
        "stepsPerSecond": round(item.steps_per_s, 6),
        "gpus": item.gpus,
        "batchSize": item.batch_size,
        "measuredAt": micro_time(item.measured_s),
    }


def recorded(status: Mapping[str, Any]) -> dict[str, TypeThroughput]:
    """The job's record by GPU type, read from its status; a malformed entry is left
    out (a record never stops a round)."""
    out: dict[str, TypeThroughput] = {}
    entries = status.get(TYPE_THROUGHPUT)
    if not isinstance(entries, list):
        return out
    for entry in entries:
        try:
            item = TypeThroughput(
                str(entry["gpuType"]),
                float(entry["stepsPerSecond"]),
                int(entry["gpus"]),
                int(entry["batchSize"]),
                parse_time(str(entry["measuredAt"])),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        positive = item.steps_per_s > 0 and item.gpus > 0 and (item.batch_size or 0) > 0
        if item.gpu_type and math.isfinite(item.steps_per_s) and positive:
            out[item.gpu_type] = item
    return out


def reported_since(reported_s: float, running_s: float | None) -> bool:
    """Whether a report arrived from the gang running since `running_s` (None: no gang
    runs whole now): after its start, which is known to the second, so more than
    START_RESOLUTION_S after it. The record (`observed`) and the job's rate in its view
    (operators/views.py) both count only such reports as the running attempt's."""
    return running_s is not None and reported_s > running_s + START_RESOLUTION_S


def measured_ratio(
    record: Mapping[str, TypeThroughput],
    spec: JobSpec,
    alloc: Allocation,
    cluster: Cluster,
    rates: RateModel,
) -> float:
    """The job's measured speed over the model's on the GPU type of `alloc`, where it
    has run on that type (1: it has not, or `alloc` spans types or shares GPUs)."""
    types = {cluster.nodes[s.node].gpu_type.name for s in alloc.shares}
    if len(types) != 1 or any(s.fraction < 1.0 for s in alloc.shares):
        return 1.0
    ran = record.get(types.pop())
    there = None if ran is None else _model_where_measured(rates, spec, ran)
    return 1.0 if ran is None or not there else ran.steps_per_s / there


def _model_where_measured(rates: RateModel, spec: JobSpec, ran: TypeThroughput) -> float | None:
    """The model's speed of the job at the GPUs, type and batch it was measured at."""
    return rates.type_rate_ips(replace(spec, batch_size=ran.batch_size), ran.gpu_type, ran.gpus)


def observed(job: JobView, cluster: Cluster, running_s: float | None) -> TypeThroughput | None:
    """What the job's latest report says of its speed on the type it runs on now
    (module docstring: None where the report is not unambiguously that type's)."""
    alloc, measured = job.allocation, job.measured
    if alloc is None or measured is None or running_s is None:
        return None
    if not reported_since(measured.reported_s, running_s) or measured.gpus != alloc.num_gpus:
        return None
    if not measured.batch_size or not measured.samples_per_s or measured.samples_per_s <= 0:
        return None
    if any(s.fraction < 1.0 for s in alloc.shares):
        return None
    types = {cluster.nodes[s.node].gpu_type.name for s in alloc.shares}
    if len(types) != 1:
        return None
    steps_per_s = measured.samples_per_s / measured.batch_size
    return TypeThroughput(
        types.pop(), steps_per_s, alloc.num_gpus, measured.batch_size, measured.reported_s
    )


def merged(
    record: Mapping[str, TypeThroughput], seen: TypeThroughput | None
) -> dict[str, TypeThroughput] | None:
    """The record with `seen` in it where that changes it: a type not recorded, another
    size or batch, or a rate off the recorded one by more than RECORD_DRIFT; None
    where it does not."""
    if seen is None:
        return None
    old = record.get(seen.gpu_type)
    if (
        old is not None
        and (old.gpus, old.batch_size) == (seen.gpus, seen.batch_size)
        and abs(seen.steps_per_s - old.steps_per_s) <= RECORD_DRIFT * old.steps_per_s
    ):
        return None
    return {**record, seen.gpu_type: seen}


def status_fields(record: Mapping[str, TypeThroughput]) -> dict[str, Any]:
    """The status field holding the record, types in name order."""
    return {TYPE_THROUGHPUT: [to_status(record[t]) for t in sorted(record)]}


class MeasuredTypeRates:
    """`Snapshot.type_rates` on a live cluster: the rate model's speeds, each job's
    measured ones where it has run on the type (module docstring)."""

    def __init__(self, rates: RateModel, measured: Mapping[str, Mapping[str, TypeThroughput]]):
        self.rates = rates
        self.measured = measured

    def type_pair_ips(
        self, spec: JobSpec, other: JobSpec, gpu: str, num_gpus: int
    ) -> tuple[float, float] | None:
        """Two jobs' rates sharing GPUs of a type: the rate model's (its throughput
        matrix's pair entry, where it has one), for Gavel's `packed` policies."""
        return self.rates.type_pair_ips(spec, other, gpu, num_gpus)

    def type_rate_ips(self, spec: JobSpec, gpu: str, num_gpus: int) -> float | None:
        model = self.rates.type_rate_ips(spec, gpu, num_gpus)
        ran = self.measured.get(spec.job_id, {}).get(gpu)
        if ran is None or model is None:
            return model
        if ran.gpus == num_gpus and ran.batch_size == spec.batch_size:
            return ran.steps_per_s
        # The model's speed where it was measured: the job's measured ratio to it.
        there = _model_where_measured(self.rates, spec, ran)
        if not there:
            return model
        return model * ran.steps_per_s / there
