"""A DLJob's spec.precision: read into JobSpec.precision, refused when malformed (by
the CRD schema and by `job_spec`), and the live view's speed follows it through the
same rate model as the replay's."""

from __future__ import annotations

from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest

from controller.model.perf import throughput_ips
from controller.model.precision import Precision
from controller.rates import RateModel
from operators.dljobs.resources import job_spec
from operators.jobs import JobRecord, State
from operators.nodes import build_cluster
from operators.pods import ShareRecord
from operators.views import job_view
from tests.operators.builders import make_dljob, make_node_body
from tests.operators.conftest import GpuCluster

NOW = 1_800_000_000.0


def dljob(name: str, precision: Any = None, model: str = "resnet50") -> dict[str, Any]:
    obj = make_dljob(name, 1)
    obj["metadata"].update({"uid": f"u-{name}", "creationTimestamp": "2027-01-15T08:00:00Z"})
    obj["spec"]["model"] = model
    if precision is not None:
        obj["spec"]["precision"] = precision
    return obj


def test_job_spec_reads_precision_and_defaults_to_tf32() -> None:
    assert job_spec(dljob("a", "bf16")).precision is Precision.BF16
    assert job_spec(dljob("b")).precision is Precision.TF32


@pytest.mark.parametrize("bad", ["int8", "BF16", "", 16])
def test_a_malformed_precision_names_the_field(bad: Any) -> None:
    with pytest.raises(ValueError) as err:
        job_spec(dljob("a", bad))
    assert str(err.value).startswith("spec.precision: must be one of tf32, bf16, fp16, fp32")


def test_the_live_views_speed_follows_the_precision_as_the_replays_does() -> None:
    """vgg16 on one A100 (nothing measured for it there): bf16 runs at the datasheet
    ratio over TF32, 2.0, and the view's rate is what the replay's rate model and the
    performance model give."""
    view = build_cluster([make_node_body("node-0", "dgx-a100")])
    rates = RateModel(view.cluster)
    node = view.cluster.nodes[0]
    speeds = {}
    for precision in ("tf32", "bf16"):
        obj = dljob(f"j-{precision}", precision, model="vgg16")
        obj["status"] = {}
        rec = JobRecord(
            obj,
            State.RUNNING,
            [],
            1,
            spec=job_spec(obj),
            shares=(ShareRecord(node.name, 0, node.gpus[0].uuid),),
            running_s=NOW - 10,
        )
        job = job_view(rec, view, rates, NOW, NOW - 60)
        assert job is not None and job.allocation is not None and job.rate_source == "model"
        expected = throughput_ips(
            rates.profile(job.spec), view.cluster, job.allocation, precision=job.spec.precision
        )
        assert job.rate_ips == pytest.approx(expected)
        speeds[precision] = job.rate_ips
    assert speeds["bf16"] / speeds["tf32"] == pytest.approx(2.0)


def test_the_crd_schema_refuses_an_unknown_precision(gpu_cluster: GpuCluster) -> None:
    with pytest.raises(kubernetes.client.ApiException) as err:
        gpu_cluster.api.create_dljob("default", dljob("bad", "int8"))
    assert err.value.status == 422
    assert "precision" in str(err.value.body)
