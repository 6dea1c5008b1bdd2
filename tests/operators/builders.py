"""Builders for operator tests: Nodes as the node agent publishes them, DLJobs, the CRD.

`make_node_body("n0")` is a DGX-1 V100 Node with its GPU annotation, GFD labels and
GPU extended resources;
`make_dljob("j1", gpus=4, duration_s=0.5)` a DLJob whose simulated workload (see
kubelet.py) runs 0.5 s.
"""

from __future__ import annotations

import time
from typing import Any

import kubernetes  # type: ignore[import-untyped]

from controller.model import Gpu
from controller.spec.types import gpu_uuid
from controller.spec.yaml_spec import presets
from operators import crd
from operators.kube import KubeApi
from operators.nodes import NodeGpus

DURATION_ENV = "GPUFLOW_TEST_DURATION_S"  # the simulated workload's run time


def node_gpus(name: str, node_type: str = "dgx1-v100") -> NodeGpus:
    t = presets()[1][node_type]
    gpus = tuple(Gpu(i, gpu_uuid("test", name, i), t.numa[i]) for i in range(len(t.numa)))
    return NodeGpus(t.gpu_type, gpus, t.links, t.nic_gbps, f"Tesla {t.gpu_type.name}")


def make_node_body(name: str, node_type: str = "dgx1-v100", rack: str = "r0") -> dict[str, Any]:
    info = node_gpus(name, node_type)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**info.labels(), crd.LABEL_RACK: rack},
            "annotations": {crd.ANN_NODE_GPUS: info.to_annotation()},
        },
        "status": gpu_resources(len(info.gpus)),
    }


def gpu_resources(gpus: int) -> dict[str, Any]:
    """A GPU node's extended resources as its device plugin (nvidia.com/gpu) and the
    node agent (gpuflow.dev/gpu-share) publish them, capacity and allocatable."""
    values = {crd.RESOURCE_GPU: str(gpus), crd.RESOURCE_GPU_SHARE: str(gpus * crd.GPU_SHARE_UNITS)}
    return {"capacity": dict(values), "allocatable": dict(values)}


def make_dljob(
    name: str,
    gpus: int = 1,
    *,
    duration_s: float = 0.5,
    priority: int = 0,
    gpu_mem_mib: int | None = None,
    namespace: str = "default",
    grace_s: int = 1,
    requests: dict[str, str] | None = None,
    template: bool = False,
    min_gpus: int | None = None,
) -> dict[str, Any]:
    """The shorthand form (image, command, env), or with `template` or `requests` (the
    worker container's resources.requests) a spec.template with one worker container."""
    spec: dict[str, Any] = {
        "image": "busybox",
        "command": ["train"],
        "gpus": gpus,
        "priority": priority,
        "model": "resnet50",
        "env": [{"name": DURATION_ENV, "value": str(duration_s)}],
        "checkpoint": {"path": f"/ckpt/{name}", "gracePeriodSeconds": grace_s},
    }
    if gpu_mem_mib is not None:
        spec["gpuMemMib"] = gpu_mem_mib
    if min_gpus is not None:
        spec["minGpus"] = min_gpus
    if template or requests is not None:
        worker = {f: spec.pop(f) for f in ("image", "command", "env")}
        worker["name"] = "worker"
        if requests is not None:
            worker["resources"] = {"requests": requests}
        spec["template"] = {
            "metadata": {"labels": {"team": "test"}},
            "spec": {"containers": [worker]},
        }
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def install_crd(client: Any, *, exist_ok: bool = False) -> None:
    """The chart's CRDs (DLJob, Quota and, as a cluster from before Quota has it, the
    deprecated Queue), each created unless `exist_ok` and it is there already."""
    ext = kubernetes.client.ApiextensionsV1Api(client)
    for path in (crd.CRD_PATH, crd.QUOTA_CRD_PATH, crd.LEGACY_QUEUE_CRD_PATH):
        try:
            ext.create_custom_resource_definition(crd.load_crd_manifest(path))
        except kubernetes.client.ApiException as exc:
            if not (exist_ok and exc.status == 409):
                raise
    api = KubeApi(client)
    deadline = time.monotonic() + 5
    while True:
        try:
            for plural in (crd.PLURAL, crd.QUOTA_PLURAL, crd.LEGACY_QUEUE_PLURAL):
                api.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, plural)
            return
        except kubernetes.client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def dljob_status(api: KubeApi, name: str, namespace: str = "default") -> dict[str, Any]:
    status: dict[str, Any] = api.get_dljob(namespace, name).get("status") or {}
    return status
