"""What the policies see of live jobs (operators/views.py): from what happened."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from controller.model import GpuUse, HostRequest, Snapshot
from controller.model.catalog import gpu_util_of
from controller.model.sharing import slowdown
from controller.model.type_throughput import TypeThroughput
from controller.placement import ConsolidatedPlacer
from controller.rates import RateModel
from operators import crd
from operators.dljobs.resources import job_spec
from operators.dljobs.type_throughput import status_fields
from operators.jobs import JobRecord, State
from operators.kube.times import micro_time
from operators.nodes import ClusterView, build_cluster
from operators.pods import ShareRecord
from operators.views import arrival_times, gpu_use_fields, job_view, measured_of
from policies.gandiva import Gandiva, GandivaState
from tests.operators.builders import make_dljob, make_node_body

NOW = 1_800_000_000.0


def cluster_view() -> ClusterView:
    return build_cluster([make_node_body("node-0")])


def record(view: ClusterView, status: dict[str, Any], *, running_s: float | None) -> JobRecord:
    obj = make_dljob("a", 2)
    obj["metadata"].update({"uid": "u-a", "creationTimestamp": "2027-01-15T08:00:00Z"})
    obj["status"] = status
    node = view.cluster.nodes[0]
    shares = tuple(ShareRecord(node.name, g, node.gpus[g].uuid) for g in (0, 1))
    return JobRecord(
        obj, State.RUNNING, [], 1, spec=job_spec(obj), shares=shares, running_s=running_s
    )


def train(reported_s: float, samples_per_s: float = 640.0) -> dict[str, Any]:
    return {
        "reportedAt": micro_time(reported_s),
        "step": 300,
        "batchSize": 64,
        "gpus": 2,
        "samplesPerSecond": samples_per_s,
        "throughput": [{"gpus": 2, "batchSize": 64, "samplesPerSecond": samples_per_s}],
        "loss": [[100, 2.0], [200, 1.5], [300, 1.25]],
        "gradSqr": 0.5,
        "gradVar": 4.0,
    }


def test_a_job_that_reports_nothing_keeps_the_model_and_says_so() -> None:
    view = cluster_view()
    rates = RateModel(view.cluster)
    rec = record(view, {"attainedGpuSeconds": 100.0}, running_s=NOW - 50)
    job = job_view(rec, view, rates, NOW, NOW - 60)
    assert job is not None and job.allocation is not None
    assert job.rate_source == "model" and job.measured is None
    assert job.rate_ips == pytest.approx(rates.rate_ips(job.spec, job.allocation))
    # Service from when the gang ran: 100 before, 2 GPUs x 50 s since.
    assert job.attained_gpu_s_at(NOW) == pytest.approx(200.0)


def test_a_fresh_report_gives_the_measured_rate_and_calibrates_the_model() -> None:
    view = cluster_view()
    rates = RateModel(view.cluster)
    status = {"attainedGpuSeconds": 100.0, "executedSeconds": 30.0, "train": train(NOW - 10)}
    job = job_view(record(view, status, running_s=NOW - 50), view, rates, NOW, NOW - 60)
    assert job is not None and job.allocation is not None and job.measured is not None
    assert job.rate_source == "measured"
    assert job.rate_ips == pytest.approx(640.0 / 64)  # steps per second
    model = rates.rate_ips(job.spec, job.allocation)
    assert job.nominal_rate_ips == pytest.approx(rates.nominal_rate_ips(job.spec) * 10.0 / model)
    assert job.done_iters_at(NOW) == pytest.approx(300 + 10.0 * 10)  # step, then the rate
    # Moving the mark to the report's time loses no service.
    assert job.attained_gpu_s_at(NOW) == pytest.approx(200.0)
    assert job.measured.losses == ((100, 2.0), (200, 1.5), (300, 1.25))
    assert (job.measured.grad_sqr, job.measured.grad_var) == (0.5, 4.0)


def test_a_stale_report_is_kept_but_the_rate_is_the_models() -> None:
    view = cluster_view()
    rates = RateModel(view.cluster)
    status = {"train": train(NOW - 600)}
    job = job_view(record(view, status, running_s=NOW - 700), view, rates, NOW, NOW - 800)
    assert job is not None and job.measured is not None
    assert job.rate_source == "model"


def test_a_report_of_the_previous_attempt_gives_steps_and_the_types_measured_ratio() -> None:
    """Restarted 5 s ago, the job's last report (10 s old) is its previous attempt's:
    its steps count, but its speed is the model's on its GPUs now, by the ratio the job
    measured on their type before (none recorded: the model's own)."""
    view = cluster_view()
    rates = RateModel(view.cluster)
    gpu = view.cluster.nodes[0].gpu_type.name
    status: dict[str, Any] = {"train": train(NOW - 10, samples_per_s=6400.0)}
    job = job_view(record(view, status, running_s=NOW - 5), view, rates, NOW, NOW - 60)
    assert job is not None and job.allocation is not None
    model = rates.rate_ips(job.spec, job.allocation)
    assert job.rate_source == "measured" and job.rate_ips == pytest.approx(model)
    assert job.done_iters_at(NOW - 5) == pytest.approx(300)  # its steps, from its start
    spec = replace(job.spec, batch_size=64)
    there = rates.type_rate_ips(spec, gpu, 2)
    assert there is not None
    ran = TypeThroughput(gpu, there / 4, 2, 64, NOW - 600)
    status.update(status_fields({gpu: ran}))
    job = job_view(record(view, status, running_s=NOW - 5), view, rates, NOW, NOW - 60)
    assert job is not None and job.rate_ips == pytest.approx(model / 4)


@pytest.mark.parametrize(
    "bad", [None, "x", {"step": 1}, {"step": "many", "reportedAt": "2027-01-15T08:00:00Z"}]
)
def test_a_malformed_summary_is_ignored(bad: object) -> None:
    assert measured_of(bad) is None


def test_jobs_first_seen_together_arrive_in_creation_then_uid_order() -> None:
    view = cluster_view()
    recs = []
    for name, uid, created in [
        ("b", "u2", "08:00:01"),
        ("c", "u1", "08:00:01"),
        ("a", "u9", "08:00:00"),
    ]:
        rec = record(view, {}, running_s=None)
        rec.obj["metadata"].update(
            {"name": name, "uid": uid, "creationTimestamp": f"2027-01-15T{created}Z"}
        )
        rec.spec = job_spec(rec.obj)
        rec.state = State.WAITING
        recs.append(rec)
    recs.append(record(view, {"arrivalTime": micro_time(NOW - 5)}, running_s=None))
    recs[-1].obj["metadata"]["name"] = "old"
    times, new = arrival_times(recs, NOW)
    assert [r.name for r in new] == ["a", "c", "b"]
    assert times["default/a"] < times["default/c"] < times["default/b"]
    assert times["default/b"] - times["default/a"] < 1e-5
    assert times["default/old"] == pytest.approx(NOW - 5)


def test_a_live_job_asks_its_worker_pods_cpu_and_memory_on_each_node() -> None:
    """The DLJob's pod requests become the JobSpec's, and a running job's allocation
    holds them, so the policy's pool counts them against node allocatable."""
    view = cluster_view()
    obj = make_dljob("c", 2, requests={"cpu": "3500m", "memory": "2Gi"})
    obj["metadata"].update({"uid": "u-c", "creationTimestamp": "2027-01-15T08:00:00Z"})
    spec = job_spec(obj)
    assert (spec.cpu_milli, spec.host_mem_mib) == (3500, 2048)
    node = view.cluster.nodes[0]
    shares = tuple(ShareRecord(node.name, g, node.gpus[g].uuid) for g in (0, 1))
    rec = JobRecord(obj, State.RUNNING, [], 1, spec=spec, shares=shares, running_s=NOW - 5)
    job = job_view(rec, view, RateModel(view.cluster), NOW, NOW - 60)
    assert job is not None and job.allocation is not None
    assert job.allocation.host == HostRequest(3500, 2048)


# -- GPU use the node agents measured ---------------------------------------------------


def measured_view(pods: dict[str, dict[str, Any]], reported_s: float) -> ClusterView:
    """node-0 with its agent's gpu-status report of `pods` at `reported_s`."""
    node = make_node_body("node-0")
    doc = {"time": reported_s, "gpus": [], "pods": pods}
    node["metadata"]["annotations"][crd.ANN_NODE_GPU_STATUS] = json.dumps(doc)
    return build_cluster([node])


def running(view: ClusterView, name: str, gpus: int, model: str) -> JobRecord:
    """A running job of `model` on the first `gpus` GPUs, one worker pod."""
    obj = make_dljob(name, gpus)
    obj["spec"]["model"] = model
    obj["metadata"].update({"uid": f"u-{name}", "creationTimestamp": "2027-01-15T08:00:00Z"})
    node = view.cluster.nodes[0]
    shares = tuple(ShareRecord(node.name, g, node.gpus[g].uuid) for g in range(gpus))
    pod = {"metadata": {"namespace": "default", "name": f"{name}-worker-0"}}
    return JobRecord(
        obj, State.RUNNING, [pod], 1, spec=job_spec(obj), shares=shares, running_s=NOW - 300
    )


@pytest.mark.parametrize(
    ("figure", "age_s", "use", "source"),
    [
        # Measured alone at 6 %: the view's utilisation, in place of ResNet-50's 0.95.
        (
            {"utilPct": 6, "memMib": 900, "alone": True, "aloneUtilPct": 6},
            5.0,
            GpuUse(0.06, 900, True, NOW - 5),
            "measured",
        ),
        # Beside another job now, alone before: its figure alone still counts.
        (
            {"utilPct": 4, "memMib": 900, "alone": False, "aloneUtilPct": 6},
            5.0,
            GpuUse(0.06, 900, False, NOW - 5),
            "measured",
        ),
        # Never measured alone: memory only, the catalogue's utilisation.
        (
            {"utilPct": 4, "memMib": 900, "alone": False},
            5.0,
            GpuUse(None, 900, False, NOW - 5),
            "catalogue",
        ),
        # Idle in its samples: 1 % (a utilisation is above 0).
        (
            {"utilPct": 0, "memMib": 900, "alone": True, "aloneUtilPct": 0},
            5.0,
            GpuUse(0.01, 900, True, NOW - 5),
            "measured",
        ),
        # A report older than MEASURED_FRESH_S is not the job now.
        ({"utilPct": 6, "memMib": 900, "alone": True, "aloneUtilPct": 6}, 120.0, None, "catalogue"),
    ],
)
def test_a_running_jobs_view_carries_its_measured_gpu_use(
    figure: dict[str, Any], age_s: float, use: GpuUse | None, source: str
) -> None:
    view = measured_view({"default/m-worker-0": figure}, NOW - age_s)
    rates = RateModel(view.cluster)
    job = job_view(running(view, "m", 2, "resnet50"), view, rates, NOW, NOW - 600)
    assert job is not None
    assert job.gpu_use == use and job.util_source == source
    util = use.util if use is not None else None
    assert job.spec.gpu_util == util
    assert gpu_util_of(job.spec) == (util if util is not None else 0.95)


def test_a_malformed_report_is_no_measurement() -> None:
    node = make_node_body("node-0")
    node["metadata"]["annotations"][crd.ANN_NODE_GPU_STATUS] = '{"time": 1, "pods": {"a": 3}}'
    assert build_cluster([node]).pod_use == {}


@pytest.mark.parametrize(("measured", "packs"), [(True, True), (False, False)])
def test_gandiva_packs_a_live_job_by_its_measured_utilisation(measured: bool, packs: bool) -> None:
    """A ResNet-50 job measured at 6 % (a launch-bound one) takes a CIFAR-10 guest
    (0.7) onto its 8 GPUs; by the catalogue (0.95 + 0.7) it would not."""
    figure = {"utilPct": 6, "memMib": 900, "alone": True, "aloneUtilPct": 6}
    view = measured_view({"default/host-worker-0": figure} if measured else {}, NOW - 5)
    rates = RateModel(view.cluster)
    host = job_view(running(view, "host", 8, "resnet50"), view, rates, NOW, NOW - 600)
    guest_obj = make_dljob("guest", 8)
    guest_obj["spec"]["model"] = "cifar10"
    guest_obj["metadata"].update({"uid": "u-g", "creationTimestamp": "2027-01-15T08:00:00Z"})
    waiting = JobRecord(guest_obj, State.WAITING, [], 0, spec=job_spec(guest_obj))
    guest = job_view(waiting, view, rates, NOW, NOW - 60)
    assert host is not None and guest is not None
    assert host.util_source == ("measured" if measured else "catalogue")
    snapshot = Snapshot(
        now_s=NOW,
        cluster=view.cluster,
        jobs=(host, guest),
        placer=ConsolidatedPlacer(view.cluster),
    )
    # The host's slice began now: without a pack the guest waits for it to end.
    plan = Gandiva().schedule(snapshot, GandivaState({host.job_id: NOW}))
    assert isinstance(plan.state, GandivaState)
    assert bool(plan.state.packs) is packs
    assert (guest.job_id in plan.run) is packs


def test_a_stopped_job_keeps_its_utilisation_measured_alone_from_its_status() -> None:
    """The applier records the running job's figure as it stops it (gpu_use_fields);
    the waiting job's view, its pods gone, reads it back; a running job without a
    figure alone this attempt takes it too."""
    figure = {"utilPct": 6, "memMib": 900, "alone": True, "aloneUtilPct": 6}
    view = measured_view({"default/m-worker-0": figure}, NOW - 5)
    rates = RateModel(view.cluster)
    before = job_view(running(view, "m", 2, "resnet50"), view, rates, NOW, NOW - 600)
    fields = gpu_use_fields(before)
    assert fields == {"gpuUse": {"utilPct": 6.0, "memMib": 900, "measuredAt": micro_time(NOW - 5)}}
    obj = make_dljob("m", 2)
    obj["metadata"].update({"uid": "u-m", "creationTimestamp": "2027-01-15T08:00:00Z"})
    obj["status"] = {"phase": "Suspended", **fields}
    waiting = JobRecord(obj, State.WAITING, [], 1, spec=job_spec(obj))
    job = job_view(waiting, measured_view({}, NOW), rates, NOW + 100, NOW - 600)
    assert job is not None and job.util_source == "measured"
    assert job.gpu_use == GpuUse(0.06, 900, False, NOW - 5) and job.spec.gpu_util == 0.06
    # Restarted beside another job, never alone since: the recorded figure alone.
    shared = {"utilPct": 4, "memMib": 950, "alone": False}
    again = running(measured_view({"default/m-worker-0": shared}, NOW + 200), "m", 2, "resnet50")
    again.obj["status"] = dict(fields)
    job = job_view(again, measured_view({"default/m-worker-0": shared}, NOW + 200), rates,
                   NOW + 205, NOW - 600)  # fmt: skip
    assert job is not None and job.gpu_use == GpuUse(0.06, 950, False, NOW + 200)
    # Nothing measured alone: nothing to record.
    assert gpu_use_fields(job_view(running(view, "n", 2, "resnet50"), view, rates, NOW, 0.0)) == {}


@pytest.mark.parametrize(
    "bad",
    [
        "6",
        {"utilPct": 6},
        {"utilPct": "x", "memMib": 1, "measuredAt": "2027-01-15T08:00:00Z"},
        {"utilPct": 0, "memMib": 1, "measuredAt": "2027-01-15T08:00:00Z"},
        {"utilPct": 6, "memMib": 1, "measuredAt": 3},
    ],
)
def test_a_malformed_recorded_gpu_use_is_none(bad: object) -> None:
    view = measured_view({}, NOW)
    obj = make_dljob("m", 2)
    obj["metadata"].update({"uid": "u-m", "creationTimestamp": "2027-01-15T08:00:00Z"})
    obj["status"] = {"phase": "Suspended", "gpuUse": bad}
    waiting = JobRecord(obj, State.WAITING, [], 1, spec=job_spec(obj))
    job = job_view(waiting, view, RateModel(view.cluster), NOW, NOW - 600)
    assert job is not None and job.gpu_use is None and job.util_source == "catalogue"


@pytest.mark.parametrize(("figure", "util"), [(6, 0.06), (None, 0.95)])
def test_a_live_jobs_speed_on_an_mps_share_follows_its_measured_utilisation(
    figure: int | None, util: float
) -> None:
    """Held to half the SMs, a job measured at 6 % takes 1.03x as long a step (its
    kernels are a small part of it); by the catalogue's 0.95 for ResNet-50, 1.44x."""
    pods = {} if figure is None else {"default/m-worker-0": {"memMib": 900, "alone": True,
                                                           "aloneUtilPct": figure}}  # fmt: skip
    view = measured_view(pods, NOW - 5)
    rates = RateModel(view.cluster)
    rec = running(view, "m", 1, "resnet50")
    whole = job_view(rec, view, rates, NOW, NOW - 600)
    node = view.cluster.nodes[0]
    rec.shares = (ShareRecord(node.name, 0, node.gpus[0].uuid, 0.5),)
    half = job_view(rec, view, rates, NOW, NOW - 600)
    assert whole is not None and half is not None
    expected = slowdown(node.sharing, util, 0.0, fraction=0.5)
    assert whole.rate_ips / half.rate_ips == pytest.approx(expected, rel=1e-9)
