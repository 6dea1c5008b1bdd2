"""The phase networks live: comm slots (cassini) and priority levels (crux) on pods.

`Operator.round()` (operators/operator.py) calls `publish` on the publisher that
`make_network_publisher` gives for `--network`, as the network registry
(controller.network.registry) says it runs live: `NetworkPublisher`
(operators/network/__init__.py) for a coflow allocator's rates, `PhasePublisher` here
for a phase form of comm slots (cassini) or priority levels (crux). Each round
it builds the running multi-node jobs as the allocator sees them (`NetJob`s, and their
iteration time from the rate model, as the simulator's `--network-model phases` does)
and asks `controller.network.phases.slots.live_phases` what each job gets. On every running
pod of a networked job it keeps these annotations, patched only where they changed:

| annotation | comm slots (cassini) | priority levels (crux) |
| --- | --- | --- |
| `gpuflow.dev/egress-gbps` (the ceiling) | the job's rate alone | the job's rate alone |
| `gpuflow.dev/egress-floor-gbps` | the fair rate, all on the wire | floor_share x ceiling |
| `gpuflow.dev/comm-period-s`, `comm-offset-s` | the job's slot, if it shares a link | — |
| `gpuflow.dev/net-priority` | — | the job's Crux level, if it shares a link |

The node agent (operators/agent/egress.py) gives each such pod an HTB class that is
guaranteed its floor and borrows up to its ceiling, at the class priority of its
level: jobs that take turns on a link each get the whole of it during their turn
(under fair rates they would keep half of it and idle the rest), and when they do
collide they fall back to their fair shares (cassini) or to strict priority over a
small floor (crux). The job's `status.bandwidthGbps` is its ceiling.

What is enforced where: a slot is held by the job itself (gpuflow.train.commslot),
whatever link the jobs share; a priority only orders the classes of one node's
egress device, so it acts where the jobs' pods share a node (docs/network.md,
"What is enforced live").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.model import Allocation, Cluster, JobSpec
from controller.network.allocators import fair
from controller.network.jobs import NetJob
from controller.network.phases.form import LiveForm, PhaseForm
from controller.network.phases.slots import LivePhase, live_phases
from controller.network.registry import NETWORKS, NetworkError, check_live
from controller.rates import RateModel
from operators import crd
from operators.dljobs.resources import fields_mutator
from operators.kube import Obj
from operators.network import (
    NetworkPublisher,
    UnknownNetworkError,
    egress_rates,
    format_gbps,
    make_publisher,
)
from operators.network.publisher import (
    Publisher,
    RoundInputs,
    RunningJob,
    has_node,
    pod_key,
    running_job,
)
from operators.writer import Writer

# The pod annotations this publisher owns (it deletes those a job no longer gets).
PHASE_ANNOTATIONS = (
    crd.ANN_EGRESS_GBPS,
    crd.ANN_EGRESS_FLOOR_GBPS,
    crd.ANN_COMM_PERIOD_S,
    crd.ANN_COMM_OFFSET_S,
    crd.ANN_NET_PRIORITY,
)


def check_live_network(name: str) -> str:
    """`name` if the operator can run it ("dedicated", a coflow allocator or a live
    phase form); UnknownNetworkError naming why otherwise (mltcp: no live form)."""
    try:
        check_live(name)
    except NetworkError as exc:
        raise UnknownNetworkError(str(exc)) from None
    return name


def make_network_publisher(
    network: str, writer: Writer
) -> NetworkPublisher | PhasePublisher | None:
    """The publisher for `--network`: None for "dedicated" (nothing to enforce)."""
    entry = NETWORKS.get(check_live_network(network))
    if entry is not None and entry.live_by_phases:
        return PhasePublisher(network, writer)
    return make_publisher(network, writer)


def live_form(network: str) -> PhaseForm:
    """The phase form the operator publishes for `network`; UnknownNetworkError for a
    network without one."""
    entry = NETWORKS.get(check_live_network(network))
    if entry is None or entry.phases is None or entry.phases.live is None:
        raise UnknownNetworkError(f"network {network!r} has no live phase form")
    return entry.phases


@dataclass(frozen=True)
class NetworkedJob:
    """A running networked job: what the allocator sees, and what its speed needs."""

    running: RunningJob
    spec: JobSpec
    allocation: Allocation
    batch_size: int | None
    gpus: int
    started_s: float


def pod_annotations(
    network: str, cluster: Cluster, jobs: list[NetworkedJob], rates: RateModel
) -> dict[str, dict[str, str | None]]:
    """The phase annotations of every pod of the multi-node jobs (module docstring):
    pod key -> {annotation: value, or None where the pod must not carry it}."""
    form = live_form(network)
    running = [j.running for j in jobs]
    fair_gbps = egress_rates(fair.NAME, cluster, running).job_gbps
    by_id = {j.running.job_id: j for j in jobs if j.running.job_id in fair_gbps}
    net_jobs = [
        NetJob(
            jid,
            tuple(cluster.node_index(n) for n in sorted(set(j.running.nodes))),
            j.running.grad_mib,
            gpus=j.gpus,
            started_s=j.started_s,
        )
        for jid, j in sorted(by_id.items())
    ]

    def iteration_s(job_id: str, gbps: float) -> float:
        j = by_id[job_id]
        ips = rates.rate_ips(j.spec, j.allocation, batch_size=j.batch_size, inter_node_gbps=gbps)
        return 1.0 / ips

    phases = live_phases(form, cluster, net_jobs, iteration_s)
    out: dict[str, dict[str, str | None]] = {}
    for jid, phase in phases.items():
        values = _values(form, phase, fair_gbps[jid])
        for pod in by_id[jid].running.pods:
            out[pod] = values
    return out


def _values(form: PhaseForm, phase: LivePhase, fair_gbps: float) -> dict[str, str | None]:
    ceiling = phase.alone_gbps
    # Slots: the fair rate with every job on the wire; levels: a share of the ceiling.
    slots = form.live is LiveForm.SLOTS
    floor = min(fair_gbps, ceiling) if slots else ceiling * form.floor_share
    slot, level = phase.slot, phase.priority
    return {
        crd.ANN_EGRESS_GBPS: format_gbps(ceiling),
        crd.ANN_EGRESS_FLOOR_GBPS: format_gbps(floor),
        crd.ANN_COMM_PERIOD_S: None if slot is None else repr(slot.period_s),
        crd.ANN_COMM_OFFSET_S: None if slot is None else repr(slot.offset_s),
        crd.ANN_NET_PRIORITY: None if level is None else str(level),
    }


class PhasePublisher(Publisher):
    """Computes the slots or levels each round and patches what changed on the pods;
    the jobs' status.bandwidthGbps gets the ceiling."""

    def __init__(self, network: str, writer: Writer) -> None:
        live_form(network)  # UnknownNetworkError for a network without one
        super().__init__(writer)
        self.policy = network

    def write(self, inputs: RoundInputs) -> None:
        snapshot, records, rates = inputs.snapshot, inputs.records, inputs.rates
        cluster = snapshot.cluster
        jobs = []
        for rec in records.values():
            view = inputs.views.get(rec.key)
            running = running_job(rec, rates)
            if running is None or rec.spec is None or view is None or view.allocation is None:
                continue
            if len(running.nodes) < 2 or not all(has_node(cluster, n) for n in running.nodes):
                continue
            started = rec.running_s if rec.running_s is not None else snapshot.now_s
            jobs.append(
                NetworkedJob(
                    running,
                    rec.spec,
                    view.allocation,
                    view.batch_size,
                    view.allocation.num_gpus,
                    started,
                )
            )
        wanted = pod_annotations(self.policy, cluster, jobs, rates)
        for job in jobs:
            rec = records[job.running.job_id]
            for pod in rec.live:
                patch = _changed(pod, wanted.get(pod_key(pod), {}))
                if patch:
                    self.writer.annotate_pods([pod], patch)
            ceiling = wanted.get(job.running.pods[0], {}).get(crd.ANN_EGRESS_GBPS)
            if ceiling is not None:
                self.writer.status(rec.obj, fields_mutator({"bandwidthGbps": float(ceiling)}))


def _changed(pod: Obj, want: Mapping[str, str | None]) -> dict[str, str | None]:
    have: dict[str, str] = pod["metadata"].get("annotations") or {}
    return {k: v for k, v in want.items() if have.get(k) != v}
