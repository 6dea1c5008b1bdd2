"""Worker pods built from a DLJob's template, and what Occupancy lets through."""

from __future__ import annotations

from typing import Any

import pytest

from operators import crd
from operators.dljobs.requests import Requests, spec_requests
from operators.dljobs.template import pod_requests
from operators.pods import Occupancy, ShareRecord, WorkerSpec, gpu_requests, worker_pods

SHARE = crd.RESOURCE_GPU_SHARE
SIDECAR = {"name": "log-shipper", "image": "fluent-bit:3", "resources": {"requests": {"cpu": "1"}}}


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {"name": "bert", "namespace": "ml", "uid": "u-1"},
        "spec": {"gpus": 2, "checkpoint": {"path": "/ckpt/bert"}, **spec},
    }


def _full_template() -> dict[str, Any]:
    worker = {
        "name": "worker",
        "image": "pytorch:2",
        "command": ["torchrun", "train.py"],
        "env": [
            {"name": "DATASET", "value": "/data"},
            {"name": "RANK", "value": "99"},  # the operator's value wins
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "resources": {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"memory": "40Gi"}},
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
        "securityContext": {"runAsNonRoot": True},
    }
    return {
        "metadata": {
            "labels": {"team": "nlp", crd.LABEL_JOB: "spoofed"},
            "annotations": {"owner": "ana"},
        },
        "spec": {
            "containers": [SIDECAR, worker],  # the worker is found by name, not place
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "bert-ckpt"}}],
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "affinity": {"podAntiAffinity": {}},
            "serviceAccountName": "trainer",
            "imagePullSecrets": [{"name": "registry"}],
            "securityContext": {"fsGroup": 1000},
            "priorityClassName": "high",
        },
    }


def _shares() -> tuple[ShareRecord, ...]:
    return (ShareRecord("n0", 0, "GPU-a"), ShareRecord("n1", 3, "GPU-b"))


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_worker_pods_keep_the_template_and_inject_only_placement() -> None:
    job = _job({"template": _full_template()})
    pods = worker_pods(WorkerSpec(job, _shares(), 2, 512, "2026-01-01T00:00:00Z"))
    assert [p["metadata"]["name"] for p in pods] == ["bert-2-0", "bert-2-1"]
    pod = pods[1]
    spec, meta = pod["spec"], pod["metadata"]
    template = _full_template()["spec"]
    kept = ("nodeSelector", "tolerations", "affinity", "securityContext", "serviceAccountName")
    for field in (*kept, "imagePullSecrets", "initContainers", "priorityClassName"):
        assert spec[field] == template[field], field
    assert spec["nodeName"] == "n1" and spec["restartPolicy"] == "Never"
    assert spec["hostname"] == "bert-2-1" and spec["subdomain"] == "bert"
    sidecar, worker = spec["containers"]
    assert sidecar == SIDECAR  # no GPUs, env or mounts for the other containers
    # the user's CPU and memory kept; its one whole GPU requested as the plugin counts
    assert worker["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "40Gi", "nvidia.com/gpu": "1"},
    }
    assert worker["securityContext"] == {"runAsNonRoot": True}
    env = _env(worker)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-b"
    assert env["DATASET"] == "/data"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["GPUFLOW_BATCH_SIZE"] == "512"
    assert env["GPUFLOW_PODINFO_DIR"] == crd.PODINFO_DIR
    assert [e["name"] for e in worker["env"]].count("RANK") == 1
    # the operator's labels win, the user's others are kept
    assert meta["labels"]["team"] == "nlp" and meta["labels"][crd.LABEL_JOB] == "bert"
    assert meta["annotations"]["owner"] == "ana"
    assert meta["annotations"][crd.ANN_BATCH_SIZE] == "512"
    assert meta["annotations"][crd.ANN_RANK] == "1"
    (owner,) = meta["ownerReferences"]
    assert (owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == ("u-1", True, True)


def _resources(shares: tuple[ShareRecord, ...], spec: dict[str, Any]) -> list[Any]:
    job = _job(spec)
    pods = worker_pods(WorkerSpec(job, shares, 1, None, "2026-01-01T00:00:00Z"))
    return [p["spec"]["containers"][-1]["resources"] for p in pods]


def test_a_pod_on_whole_gpus_requests_them_as_the_device_plugin_counts() -> None:
    shares = tuple(ShareRecord("n0", i, f"GPU-{i}") for i in (0, 2, 3))
    shares += (ShareRecord("n1", 0, "GPU-x"),)
    # a user's own count of GPUs is replaced by what the pod holds on its node
    template = _full_template()
    template["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    first, second = _resources(shares, {"template": template})
    assert first["limits"] == {"memory": "40Gi", "nvidia.com/gpu": "3"}
    assert first["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "3"}
    assert second["limits"]["nvidia.com/gpu"] == second["requests"]["nvidia.com/gpu"] == "1"
    assert crd.RESOURCE_GPU_SHARE not in first["limits"]
    (shorthand,) = _resources(shares[:1], {"image": "busybox"})
    assert shorthand == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}


def test_a_pod_on_shared_gpus_requests_hundredths_of_gpus_not_device_plugin_gpus() -> None:
    # a third of GPU 0 and half of GPU 1: 33 + 50 hundredths; three thirds fill a GPU
    shares = (ShareRecord("n0", 0, "GPU-0", 1 / 3), ShareRecord("n0", 1, "GPU-1", 0.5))
    (res,) = _resources(shares, {"image": "busybox", "gpuMemMib": 4096})
    assert res == {"limits": {SHARE: "83"}, "requests": {SHARE: "83"}}
    assert crd.GPU_SHARE_UNITS == 100
    assert 3 * gpu_requests([ShareRecord("n0", 0, "GPU-0", 1 / 3)])[crd.RESOURCE_GPU_SHARE] <= 100
    # 0.29 * 100 is 28.999999999999996 in floats: still 29 hundredths
    assert gpu_requests([ShareRecord("n0", 0, "GPU-0", 0.29)]) == {crd.RESOURCE_GPU_SHARE: 29}
    # a pod with a whole GPU and a share of another asks for both
    mixed = [ShareRecord("n0", 0, "GPU-0"), ShareRecord("n0", 1, "GPU-1", 0.25)]
    assert gpu_requests(mixed) == {crd.RESOURCE_GPU: 1, crd.RESOURCE_GPU_SHARE: 25}


def test_every_worker_pod_mounts_its_annotations_read_only() -> None:
    job = _job({"template": _full_template()})
    (pod, _) = worker_pods(WorkerSpec(job, _shares(), 1, None, "2026-01-01T00:00:00Z"))
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["ckpt"] == {"name": "ckpt", "persistentVolumeClaim": {"claimName": "bert-ckpt"}}
    (item,) = volumes[crd.PODINFO_VOLUME]["downwardAPI"]["items"]
    assert item == {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    worker = pod["spec"]["containers"][1]
    mounts = {m["name"]: m for m in worker["volumeMounts"]}
    assert mounts["ckpt"]["mountPath"] == "/ckpt"
    assert mounts[crd.PODINFO_VOLUME] == {
        "name": crd.PODINFO_VOLUME,
        "mountPath": "/etc/gpuflow/podinfo",
        "readOnly": True,
    }
    assert "volumeMounts" not in pod["spec"]["containers"][0]
    assert crd.ANN_BATCH_SIZE not in pod["metadata"]["annotations"]  # no batch size given


def test_the_shorthand_is_a_template_with_one_worker_container() -> None:
    job = _job({"image": "busybox", "command": ["train"], "env": [{"name": "A", "value": "1"}]})
    (pod, _) = worker_pods(WorkerSpec(job, _shares(), 1, None, "2026-01-01T00:00:00Z"))
    (worker,) = pod["spec"]["containers"]
    assert worker["name"] == "worker" and worker["image"] == "busybox"
    assert worker["command"] == ["train"] and _env(worker)["A"] == "1"
    assert _env(worker)["RANK"] == "0"


def test_worker_pods_do_not_change_the_job() -> None:
    job = _job({"template": _full_template()})
    worker_pods(WorkerSpec(job, _shares(), 1, None, "2026-01-01T00:00:00Z"))
    assert job["spec"]["template"] == _full_template()


def test_pod_requests_of_a_job() -> None:
    # worker 8 CPU + sidecar 1; 32 GiB; the init container requests nothing
    assert pod_requests(_job({"template": _full_template()})) == (9000, 32768)
    assert pod_requests(_job({"image": "busybox"})) == (0, 0)


def _pod(name: str, node: str, uuid: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    shares = f'[{{"node":"{node}","gpu":0,"uuid":"{uuid}","fraction":1.0}}]'
    return {
        "metadata": {"name": name, "annotations": {crd.ANN_ALLOCATION: shares}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "w", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }


def test_occupancy_refuses_requests_beyond_allocatable_free() -> None:
    alloc = {"n0": Requests(10_000, 100_000)}
    pods = [_pod("a-1-0", "n0", "GPU-0", "4"), _pod("old-1-0", "n0", "GPU-9", "6", "Succeeded")]
    occ = Occupancy(pods, alloc)
    share = (ShareRecord("n0", 1, "GPU-1"),)
    why = occ.conflict(share, 0, {}, Requests(8000, 0))
    assert why is not None and why.reason == "WaitingForResources"
    assert why.message == "n0: needs 8 CPU, 6 allocatable free"
    assert occ.conflict(share, 0, {}, Requests(6000, 0)) is None  # the finished pod is free
    occ.add(share, 0, "b", Requests(6000, 0))
    assert occ.conflict((ShareRecord("n0", 2, "GPU-2"),), 0, {}, Requests(1, 0)) is not None
    # a node without allocatable is unconstrained
    assert occ.conflict((ShareRecord("n9", 0, "GPU-x"),), 0, {}, Requests(10**9, 10**9)) is None


def test_occupancy_names_the_holders_of_a_full_gpu() -> None:
    occ = Occupancy([_pod("a-1-0", "n0", "GPU-0", "1")])
    why = occ.conflict((ShareRecord("n0", 0, "GPU-0", 0.5),), 0, {"GPU-0": 16_000})
    assert why is not None and why.reason == "WaitingForGpus"
    assert why.message == "GPU-0 held by pod(s) a-1-0"


def test_occupancy_counts_pod_requests_with_init_containers() -> None:
    pod = _pod("a-1-0", "n0", "GPU-0", "1")
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
    occ = Occupancy([pod], {"n0": Requests(4000, 10)})
    assert occ.requested["n0"] == spec_requests(pod["spec"]) == Requests(3000, 0)


@pytest.mark.parametrize("time_sliced", [False, True])
def test_a_shared_gpu_gets_mps_limits_unless_its_node_time_slices(time_sliced: bool) -> None:
    """What a replay assumes follows what the pod gets (issue 27): MPS limits (threads
    from the share, memory from gpuMemMib) on an MPS node, none on a time-sliced one."""
    job = _job({"template": _full_template(), "gpuMemMib": 4096})
    shares = (ShareRecord("n0", 0, "GPU-a", 0.5),)
    sliced = frozenset({"n0"}) if time_sliced else frozenset()
    (pod,) = worker_pods(WorkerSpec(job, shares, 1, None, "2026-01-01T00:00:00Z", sliced))
    env = _env(pod["spec"]["containers"][1])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    if time_sliced:
        assert not any(k.startswith("CUDA_MPS_") for k in env)
    else:
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
