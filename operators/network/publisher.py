"""What both live network publishers do each round before their own rule.

`NetworkPublisher` (operators/network/__init__.py: a coflow allocator's rates) and
`PhasePublisher` (operators/network/phases.py: comm slots or priority levels) are
`Publisher`s: `Operator.round()` (operators/operator.py) calls `publish` after
`Controller.decide`, which keeps one RateModel per Cluster (a cache of model
profiles), indexes the snapshot's job views, hands them (`RoundInputs`) to the subclass's
`write`
and flushes the writer. `running_job` is a DLJob record as the rate computation sees
it (`RunningJob`), the same for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from controller.model import Cluster, JobView, Snapshot
from controller.rates import RateModel
from operators.jobs import JobRecord, State
from operators.kube import Obj
from operators.writer import Writer


@dataclass(frozen=True)
class RunningJob:
    """A running job as the rate computation needs it.

    `nodes` are node names (its pods' allocation), `pods` its running pods' keys
    ("namespace/name"); `grad_mib`, `arrival_s`, `done_iters` and `remaining_s` are
    what the coflow policies weigh (`NetJob`).
    """

    job_id: str
    nodes: tuple[str, ...]
    pods: tuple[str, ...]
    grad_mib: float
    arrival_s: float = 0.0
    done_iters: float = 0.0
    remaining_s: float | None = None


@dataclass(frozen=True)
class RoundInputs:
    """What a publisher writes from: the round's snapshot, the DLJob records by key,
    the snapshot's job views by id, and the cluster's RateModel."""

    snapshot: Snapshot
    records: Mapping[str, JobRecord]
    views: Mapping[str, JobView]
    rates: RateModel


class Publisher(ABC):
    """A round's publication: a subclass writes its annotations and statuses in
    `write`; nothing is held between rounds but a RateModel per Cluster."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self._rates: RateModel | None = None

    def publish(self, snapshot: Snapshot | None, records: Mapping[str, JobRecord]) -> None:
        if snapshot is None:
            return
        if self._rates is None or self._rates.cluster is not snapshot.cluster:
            self._rates = RateModel(snapshot.cluster)
        views = {j.job_id: j for j in snapshot.jobs}
        self.write(RoundInputs(snapshot, records, views, self._rates))
        self.writer.flush()

    @abstractmethod
    def write(self, inputs: RoundInputs) -> None:
        """Queue this round's writes on `self.writer` (`publish` flushes them)."""


def running_job(rec: JobRecord, rates: RateModel) -> RunningJob | None:
    """The record as a running job with live pods (None if it is not one): its nodes
    and pods by name, its model's gradient size, its arrival; no progress."""
    if rec.state is not State.RUNNING or rec.spec is None or not rec.live:
        return None
    return RunningJob(
        rec.key,
        tuple(sorted({s.node for s in rec.shares})),
        tuple(sorted(pod_key(p) for p in rec.live)),
        rates.profile(rec.spec).grad_mib,
        arrival_s=rec.spec.submit_s,
    )


def pod_key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def has_node(cluster: Cluster, name: str) -> bool:
    try:
        cluster.node_index(name)
    except KeyError:
        return False
    return True
