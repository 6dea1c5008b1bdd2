"""A DLJob's spec.gpuModels: read into JobSpec.gpu_models, refused when malformed (by
the CRD schema and by `job_spec`), and respected live: placed only on nodes of those
models, Unschedulable, naming them, when the cluster has none."""

from __future__ import annotations

from typing import Any

import kubernetes  # type: ignore[import-untyped]
import pytest

from operators.dljobs.resources import job_spec
from operators.nodes import build_cluster
from operators.views import never_fits
from tests.operators.builders import make_dljob, make_node_body
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster

A100 = "A100-SXM4-40GB"  # controller/presets/dgx-a100.yaml
V100 = "V100-SXM2-16GB"  # the builders' default node, dgx1-v100


def with_models(obj: dict[str, Any], models: Any) -> dict[str, Any]:
    obj["spec"]["gpuModels"] = models
    return obj


def stamped(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].update({"uid": "u-1", "creationTimestamp": "2027-01-15T08:00:00Z"})
    return obj


def test_job_spec_reads_gpu_models() -> None:
    spec = job_spec(stamped(with_models(make_dljob("a", 2), [A100, V100])))
    assert spec.gpu_models == frozenset({A100, V100})
    assert job_spec(stamped(make_dljob("b", 2))).gpu_models == frozenset()


@pytest.mark.parametrize(
    ("bad", "field"),
    [("A100", "spec.gpuModels:"), ([A100, ""], "spec.gpuModels[1]:"), ([3], "spec.gpuModels[0]:")],
)
def test_malformed_gpu_models_name_the_field(bad: Any, field: str) -> None:
    with pytest.raises(ValueError) as err:
        job_spec(stamped(with_models(make_dljob("a", 1), bad)))
    assert str(err.value).startswith(field)


def test_never_fits_counts_only_the_accepted_models() -> None:
    cluster = build_cluster(
        [make_node_body("node-0"), make_node_body("node-1", "dgx-a100")]
    ).cluster
    a100 = job_spec(stamped(with_models(make_dljob("a", 8), [A100])))
    assert never_fits(a100, cluster) is None
    # 16 GPUs in the cluster, but only 8 of them A100s
    big = job_spec(stamped(with_models(make_dljob("b", 9), [A100])))
    assert never_fits(big, cluster) == f"needs 9 GPUs; the cluster has 8 of {A100} on 1 node(s)"
    h100 = job_spec(stamped(with_models(make_dljob("c", 1), ["H100-SXM5-80GB", "T4"])))
    assert never_fits(h100, cluster) == (
        f"accepts GPU models H100-SXM5-80GB, T4; the cluster has {A100}, {V100}"
    )


def test_the_crd_schema_refuses_an_empty_model_name(gpu_cluster: RealCluster) -> None:
    with pytest.raises(kubernetes.client.ApiException) as err:
        gpu_cluster.api.create_dljob("default", with_models(make_dljob("bad", 1), [""]))
    assert err.value.status == 422
    assert "gpuModels" in str(err.value.body)


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_a_job_runs_only_on_a_model_it_accepts(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    # node-0 is a DGX-1 (V100), node-1 a DGX A100; names sort node-0 first, so a
    # placer blind to models would put a 1-GPU job on node-0.
    gpu_cluster.add_node("node-1", rack="r0", node_type="dgx-a100")
    api.create_dljob("default", with_models(make_dljob("on-a100", 1, duration_s=0.2), [A100]))
    api.create_dljob("default", with_models(make_dljob("on-h100", 1), ["H100-SXM5-80GB"]))
    kubelet = Kubelet(gpu_cluster.client).start()
    try:
        with running_operator(gpu_cluster.client):
            wait_phases(api, "Succeeded", ["on-a100"])
            wait_phases(api, "Unschedulable", ["on-h100"])
    finally:
        kubelet.stop()
    status = api.get_dljob("default", "on-a100")["status"]
    nodes = {s["node"] for s in status["allocation"]["shares"]}
    assert nodes == {"node-1"}
    cond = next(
        c
        for c in api.get_dljob("default", "on-h100")["status"]["conditions"]
        if c["type"] == "Unschedulable"
    )
    assert cond["status"] == "True"
    assert cond["message"] == (f"accepts GPU models H100-SXM5-80GB; the cluster has {A100}, {V100}")
