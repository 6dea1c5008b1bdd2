"""The network allocator's rates for a live cluster, and their publication on pods.

`Operator.round()` (operators/operator.py) calls `NetworkPublisher.publish` after
`Controller.decide`, when `OperatorConfig.network` names a network whose live form
is its coflow allocator's rates (controller.network.registry). The rates come
from `egress_rates`, a pure function of the Cluster and the running multi-node jobs'
allocations, which runs `controller.network.jobs.job_rates` (what the simulator
calls, controller/sim/bandwidth.py) on the same ring coflows, capacities (node NICs,
rack uplinks) and policy.

One deviation from the simulator: `job_rates` gives a job its *effective* rate, the
contended rate raised by the time its neighbours spend computing (their duty cycle
on the wire, phi < 1). A shaper cannot know when a neighbour computes, and HTB
classes here never borrow (rate = ceil, operators/agent/bandwidth.py), so the
operator asks for the allocator's rates with every coflow in flight: each job is
modelled as always on the wire (phi = 1), and `job_rates` then returns the
contended rate, the slowest of the job's ring flows. Rates on a link therefore sum
to at most its capacity; the price is that a job cannot use bandwidth a computing
neighbour leaves idle.

Each pod of a job sends one flow of the job's ring (docs/network.md), so its node
enforces the job's rate on the pod's egress: the pod annotation
`gpuflow.dev/egress-gbps`, read by the node agent (operators/agent/egress.py).
The job's `status.bandwidthGbps` gets the same figure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.model import Cluster, JobView
from controller.network.jobs import NetJob, job_rates
from controller.network.registry import DEDICATED, NETWORKS, STEADY, names
from controller.rates import RateModel
from operators import crd
from operators.dljobs.resources import fields_mutator
from operators.jobs import JobRecord
from operators.kube import Obj
from operators.network.publisher import (
    Publisher,
    RoundInputs,
    RunningJob,
    has_node,
    running_job,
)
from operators.writer import Writer

log = logging.getLogger(__name__)

# MB (10^6 bytes) per second carried at 1 Gbit/s: how job_rates turns flow sizes into
# time on the wire (controller/network/jobs.py).
MB_PER_S_PER_GBPS = 125.0
# Rates are published to 1 kbit/s: finer differences are float noise between rounds,
# and tc is given whole bit/s anyway.
GBPS_DIGITS = 6


class UnknownNetworkError(ValueError):
    """`--network` names no network the operator can run."""


def check_network(name: str) -> str:
    """`name` if it is "dedicated" or a network with a coflow allocator;
    UnknownNetworkError otherwise."""
    if name not in names(STEADY):
        raise UnknownNetworkError(f"unknown network {name!r} (known: {', '.join(names(STEADY))})")
    return name


@dataclass(frozen=True)
class EgressRates:
    """Inter-node Gbit/s per multi-node job, and the egress Gbit/s of each of its pods."""

    job_gbps: dict[str, float]
    pod_gbps: dict[str, float]


def egress_rates(policy: str, cluster: Cluster, jobs: Sequence[RunningJob]) -> EgressRates:
    """The allocator's rate for every job spanning two or more nodes of `cluster`
    (jobs on one node, or on a node the cluster no longer has, get none)."""
    net_jobs: list[NetJob] = []
    by_id: dict[str, RunningJob] = {}
    for job in sorted(jobs, key=lambda j: j.job_id):
        names = sorted(set(job.nodes))
        if len(names) < 2 or not all(has_node(cluster, n) for n in names):
            continue
        nodes = tuple(cluster.node_index(n) for n in names)
        net_jobs.append(
            NetJob(
                job.job_id,
                nodes,
                job.grad_mib,
                arrival_s=job.arrival_s,
                done_iters=job.done_iters,
                remaining_s=job.remaining_s,
            )
        )
        by_id[job.job_id] = job
    if not net_jobs:
        return EgressRates({}, {})
    wire_s = {j.job_id: j.flow_mb / MB_PER_S_PER_GBPS for j in net_jobs}

    def always_on_the_wire_s(job_id: str, gbps: float) -> float:
        # An iteration that is all transfer: duty 1, so job_rates returns the rates
        # with every coflow in flight (the module docstring says why).
        return wire_s[job_id] / gbps

    gbps = job_rates(policy, cluster, net_jobs, always_on_the_wire_s)
    job_gbps = {k: round(v, GBPS_DIGITS) for k, v in gbps.items()}
    pod_gbps = {pod: job_gbps[k] for k, job in by_id.items() for pod in job.pods}
    return EgressRates(job_gbps, pod_gbps)


def format_gbps(gbps: float) -> str:
    """The annotation's spelling of a rate: a decimal number of Gbit/s."""
    return repr(round(gbps, GBPS_DIGITS))


def make_publisher(network: str, writer: Writer) -> NetworkPublisher | None:
    """The publisher for `--network` (None for "dedicated": nothing to enforce);
    UnknownNetworkError for a name that is neither."""
    if check_network(network) == DEDICATED:
        return None
    return NetworkPublisher(network, writer)


class NetworkPublisher(Publisher):
    """Computes the rates each round and writes what changed: the pods' egress
    annotation and the jobs' status.bandwidthGbps."""

    def __init__(self, network: str, writer: Writer) -> None:
        if check_network(network) == DEDICATED:
            raise UnknownNetworkError("the dedicated network allocates nothing to publish")
        allocator = NETWORKS[network].allocator
        assert allocator is not None  # check_network saw to it
        super().__init__(writer)
        self.policy = allocator

    def write(self, inputs: RoundInputs) -> None:
        now_s, views = inputs.snapshot.now_s, inputs.views
        running = [
            job
            for rec in inputs.records.values()
            if (job := _running_job(rec, views.get(rec.key), now_s, inputs.rates)) is not None
        ]
        egress = egress_rates(self.policy, inputs.snapshot.cluster, running)
        for key, gbps in egress.job_gbps.items():
            rec = inputs.records[key]
            value = format_gbps(gbps)
            stale = [p for p in rec.live if _annotation(p) != value]
            if stale:
                self.writer.annotate_pods(stale, {crd.ANN_EGRESS_GBPS: value})
            self.writer.status(rec.obj, fields_mutator({"bandwidthGbps": gbps}))


def _running_job(
    rec: JobRecord, view: JobView | None, now_s: float, rates: RateModel
) -> RunningJob | None:
    """The record as a running job, with its progress and time left where it has an
    allocation in the snapshot."""
    job = running_job(rec, rates)
    if job is None or view is None or view.allocation is None:
        return job
    done = view.done_iters_at(now_s)
    remaining_s = None
    if view.total_iters > 0 and view.nominal_rate_ips > 0:
        remaining_s = max(0.0, view.total_iters - done) / view.nominal_rate_ips
    return replace(job, done_iters=done, remaining_s=remaining_s)


def _annotation(pod: Obj) -> str | None:
    ann: dict[str, str] = pod["metadata"].get("annotations") or {}
    return ann.get(crd.ANN_EGRESS_GBPS)
