"""Worker pods and headless services of DLJobs, and the GPUs that pods hold.

A job runs as one pod per node of its allocation (rank = the node's place in the
allocation), pinned with `nodeName` and given its GPUs by UUID in
NVIDIA_VISIBLE_DEVICES; shared GPUs add the MPS limits (not on a node whose GPUs are
time-sliced). Its worker container requests what it holds as the kubelet counts GPUs
(`gpu_requests`: nvidia.com/gpu, gpuflow.dev/gpu-share). Every pod carries the whole
allocation in an annotation, which is all the operator needs to rebuild its state
after a restart. `Occupancy` sums what the pods that are not finished hold on each
GPU, terminating ones included: the backend creates a pod only where it fits.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operators import crd
from operators.dljobs.requests import NO_REQUESTS, Requests, shortfall, spec_requests
from operators.dljobs.resources import (
    METRICS_SECRET_KEY,
    Reasoned,
    database_id,
    grace_period_s,
    metrics_secret_name,
)
from operators.dljobs.template import pod_template, worker_index
from operators.kube import Obj

MASTER_PORT = 29500  # PyTorch's default rendezvous port
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
SHARE_EPS = 1e-9
# Reasons of an admitted job whose pods cannot be created yet (Occupancy.conflict).
WAITING_GPUS = "WaitingForGpus"
WAITING_RESOURCES = "WaitingForResources"


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One GPU share of an allocation as pods record it."""

    node: str
    gpu: int
    uuid: str
    fraction: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpu": self.gpu, "uuid": self.uuid, "fraction": self.fraction}


def encode_shares(shares: Iterable[ShareRecord]) -> str:
    return json.dumps([s.to_json() for s in shares], separators=(",", ":"))


def decode_shares(text: str) -> list[ShareRecord]:
    return [
        ShareRecord(str(d["node"]), int(d["gpu"]), str(d["uuid"]), float(d["fraction"]))
        for d in json.loads(text)
    ]


def pod_name(job: str, attempt: int, rank: int) -> str:
    return f"{job}-{attempt}-{rank}"


def pod_attempt(pod: Obj) -> int:
    labels = pod["metadata"].get("labels") or {}
    return int(labels.get(crd.LABEL_ATTEMPT, 0))


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def finished(pod: Obj) -> bool:
    return pod_phase(pod) in FINISHED_PHASES


def terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def pod_shares(pod: Obj) -> list[ShareRecord]:
    """The shares of the job's allocation on this pod's own node."""
    ann = pod["metadata"].get("annotations") or {}
    text = ann.get(crd.ANN_ALLOCATION)
    if not text:
        return []
    node = (pod.get("spec") or {}).get("nodeName")
    return [s for s in decode_shares(text) if s.node == node]


def pod_mem_mib(pod: Obj) -> int:
    ann = pod["metadata"].get("annotations") or {}
    return int(ann.get(crd.ANN_GPU_MEM_MIB) or 0)


class Occupancy:
    """What unfinished pods hold: on each GPU (by UUID) compute fraction and GPU
    memory, on each node the CPU and memory their containers request."""

    def __init__(
        self, pods: Iterable[Obj] = (), allocatable: Mapping[str, Requests] | None = None
    ) -> None:
        self.fraction: dict[str, float] = {}
        self.mem_mib: dict[str, int] = {}
        self.holders: dict[str, set[str]] = {}
        self.allocatable: Mapping[str, Requests] = allocatable or {}
        self.requested: dict[str, Requests] = {}  # node -> what its pods request
        for pod in pods:
            if not finished(pod):
                name = pod["metadata"]["name"]
                self.add(pod_shares(pod), pod_mem_mib(pod), name, spec_requests(pod["spec"]))

    def add(
        self,
        shares: Iterable[ShareRecord],
        mem_mib: int,
        holder: str,
        requests: Requests = NO_REQUESTS,
    ) -> None:
        """Count a pod set: `requests` once per node of `shares` (one pod per node)."""
        shares = list(shares)
        for s in shares:
            self.fraction[s.uuid] = self.fraction.get(s.uuid, 0.0) + s.fraction
            self.mem_mib[s.uuid] = self.mem_mib.get(s.uuid, 0) + mem_mib
            self.holders.setdefault(s.uuid, set()).add(holder)
        for node in node_order(shares):
            self.requested[node] = self.requested.get(node, Requests()).plus(requests)

    def conflict(
        self,
        shares: Iterable[ShareRecord],
        mem_mib: int,
        cap: Mapping[str, int],
        requests: Requests = NO_REQUESTS,
    ) -> Reasoned | None:
        """None if pods with these shares, each requesting `requests`, fit next to what
        is held; else why not: WaitingForGpus with the first full GPU and its holders,
        or WaitingForResources naming the node and the resource that is short."""
        shares = list(shares)
        for s in shares:
            used = self.fraction.get(s.uuid, 0.0)
            full = used + s.fraction > 1.0 + SHARE_EPS
            if s.fraction < 1.0 and self.mem_mib.get(s.uuid, 0) + mem_mib > cap.get(s.uuid, 0):
                full = True
            if full:
                holders = ", ".join(sorted(self.holders.get(s.uuid, ())))
                return Reasoned(WAITING_GPUS, f"{s.uuid} held by pod(s) {holders}")
        for node in node_order(shares):
            alloc = self.allocatable.get(node)
            if alloc is not None:
                free = alloc.minus(self.requested.get(node, Requests()))
                short = shortfall(node, requests, free)
                if short:
                    return Reasoned(WAITING_RESOURCES, short)
        return None


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one attempt of a job needs to build its pods."""

    job: Obj
    shares: tuple[ShareRecord, ...]
    attempt: int
    batch_size: int | None
    started_at: str
    # Nodes whose GPUs are time-sliced (their agent's --sharing): no MPS daemon there,
    # so a shared GPU's pod gets no CUDA_MPS_* limits (controller.model.sharing).
    time_sliced: frozenset[str] = frozenset()


def node_order(shares: Iterable[ShareRecord]) -> list[str]:
    """Nodes of an allocation in rank order (sorted by name: deterministic)."""
    return sorted({s.node for s in shares})


def service_name(job: Obj) -> str:
    return str(job["metadata"]["name"])


def owner_reference(job: Obj, *, controller: bool = True) -> Obj:
    """The DLJob `job` as an owner: the garbage collector deletes what it owns with it.
    `controller` False, for what the API makes beside the operator (the metrics Secret,
    api.cluster_mode.metrics_secrets): neither `controller` (the operator controls the
    job) nor blockOwnerDeletion (which would need RBAC on dljobs/finalizers)."""
    meta = job["metadata"]
    ref: Obj = {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if controller:
        ref |= {"controller": True, "blockOwnerDeletion": True}
    return ref


def headless_service(job: Obj) -> Obj:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job),
            "namespace": meta["namespace"],
            "labels": {crd.LABEL_JOB: meta["name"], crd.LABEL_MANAGED: crd.MANAGER},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {crd.LABEL_JOB: meta["name"]},
            "publishNotReadyAddresses": True,  # rendezvous before readiness
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }


def worker_pods(w: WorkerSpec, api_url: str = "") -> list[Obj]:
    """The pods of one attempt: the job's template with only the operator's placement
    injected (node, GPU, rendezvous and metrics env, labels, annotations, owner, restart
    policy, hostname, grace period, the podinfo volume); everything else is the user's.
    `api_url` is the API's REST root as pods reach it (`--api-url`; empty: not set)."""
    meta, spec = w.job["metadata"], w.job.get("spec") or {}
    name, ns = meta["name"], meta["namespace"]
    nodes = node_order(w.shares)
    master = f"{pod_name(name, w.attempt, 0)}.{service_name(w.job)}.{ns}.svc"
    mem = int(spec.get("gpuMemMib") or 0)
    pods = []
    for rank, node in enumerate(nodes):
        mine = [s for s in w.shares if s.node == node]
        pod = pod_name(name, w.attempt, rank)
        template = pod_template(spec)
        tmeta, pod_spec = template["metadata"], template["spec"]
        annotations = {
            crd.ANN_ALLOCATION: encode_shares(w.shares),
            crd.ANN_RANK: str(rank),
            crd.ANN_WORLD_SIZE: str(len(nodes)),
            crd.ANN_GPU_MEM_MIB: str(mem),
            crd.ANN_STARTED_AT: w.started_at,
        }
        if w.batch_size is not None:
            annotations[crd.ANN_BATCH_SIZE] = str(w.batch_size)
        containers = pod_spec["containers"]
        worker = containers[worker_index(containers)]
        ours = _env(w, mine, mem, master, rank, len(nodes)) + _metrics_env(w.job, api_url)
        worker["env"] = _merge_env(worker.get("env") or [], ours)
        _request_gpus(worker, gpu_requests(mine))
        _mount_podinfo(pod_spec, worker)
        pod_spec.update(
            {
                "nodeName": node,
                "restartPolicy": "Never",
                "hostname": pod,
                "subdomain": service_name(w.job),
                "terminationGracePeriodSeconds": grace_period_s(w.job),
            }
        )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": ns,
                    "labels": {
                        **(tmeta.get("labels") or {}),
                        crd.LABEL_JOB: name,
                        crd.LABEL_ATTEMPT: str(w.attempt),
                        crd.LABEL_MANAGED: crd.MANAGER,
                    },
                    "annotations": {**(tmeta.get("annotations") or {}), **annotations},
                    "ownerReferences": [owner_reference(w.job)],
                },
                "spec": pod_spec,
            }
        )
    return pods


def gpu_requests(mine: Iterable[ShareRecord]) -> dict[str, int]:
    """The extended resources a pod holding the shares `mine` requests: its whole GPUs
    as nvidia.com/gpu, its shares of GPUs in gpuflow.dev/gpu-share hundredths (each
    rounded down, at least 1: shares that fill a GPU never ask more than it has);
    a resource the pod needs none of is left out."""
    whole = shared = 0
    for s in mine:
        if s.fraction >= 1.0 - SHARE_EPS:
            whole += 1
        else:
            shared += max(1, math.floor(s.fraction * crd.GPU_SHARE_UNITS + SHARE_EPS))
    out = {crd.RESOURCE_GPU: whole, crd.RESOURCE_GPU_SHARE: shared}
    return {name: n for name, n in out.items() if n}


def _request_gpus(worker: Obj, amounts: Mapping[str, int]) -> None:
    """Set the worker's GPU resources to `amounts`, limits and requests alike (an
    extended resource cannot be overcommitted), replacing any the template gave."""
    resources = dict(worker.get("resources") or {})
    for kind in ("limits", "requests"):
        values = {
            k: v
            for k, v in (resources.get(kind) or {}).items()
            if k not in (crd.RESOURCE_GPU, crd.RESOURCE_GPU_SHARE)
        }
        values.update({name: str(n) for name, n in amounts.items()})
        if values:
            resources[kind] = values
        else:
            resources.pop(kind, None)
    worker["resources"] = resources


def _merge_env(user: list[Obj], ours: list[Obj]) -> list[Obj]:
    """The operator's env first (so user values may refer to $(RANK) etc.), then the
    user's entries whose names the operator does not set, valueFrom ones included."""
    names = {e["name"] for e in ours}
    return ours + [copy.deepcopy(e) for e in user if e.get("name") not in names]


def _mount_podinfo(pod_spec: Obj, worker: Obj) -> None:
    """The downward-API volume exposing the pod's annotations (the batch size a policy
    sets on a running job) as PODINFO_DIR/annotations, read-only in the worker."""
    volume = {
        "name": crd.PODINFO_VOLUME,
        "downwardAPI": {
            "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
        },
    }
    mount = {"name": crd.PODINFO_VOLUME, "mountPath": crd.PODINFO_DIR, "readOnly": True}
    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != crd.PODINFO_VOLUME]
    pod_spec["volumes"] = [*volumes, volume]
    mounts = [m for m in worker.get("volumeMounts") or [] if m.get("name") != crd.PODINFO_VOLUME]
    worker["volumeMounts"] = [*mounts, mount]


def _env(
    w: WorkerSpec, mine: list[ShareRecord], mem: int, master: str, rank: int, world: int
) -> list[Obj]:
    spec = w.job.get("spec") or {}
    ckpt = spec.get("checkpoint") or {}
    env: dict[str, str] = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(s.uuid for s in mine),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(world),  # pods (nodes); each runs GPUFLOW_GPUS_PER_POD ranks
        "RANK": str(rank),
        "GPUFLOW_JOB": w.job["metadata"]["name"],
        "GPUFLOW_GPUS_PER_POD": str(len(mine)),
        "GPUFLOW_ATTEMPT": str(w.attempt),
        "GPUFLOW_RESUME": "1" if w.attempt > 1 else "0",
        "GPUFLOW_PODINFO_DIR": crd.PODINFO_DIR,
    }
    if ckpt.get("path"):
        env["GPUFLOW_CHECKPOINT_PATH"] = str(ckpt["path"])
    if w.batch_size is not None:
        env["GPUFLOW_BATCH_SIZE"] = str(w.batch_size)
    shared = [s for s in mine if s.fraction < 1.0]
    if shared and mine[0].node not in w.time_sliced:
        # One MPS client per pod: the smallest share bounds its threads everywhere.
        pct = max(1, int(min(s.fraction for s in shared) * 100))
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(pct)
        if mem:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
                f"{i}={mem}M" for i in range(len(mine))
            )
    return [{"name": k, "value": v} for k, v in env.items()]


def _metrics_env(job: Obj, api_url: str) -> list[Obj]:
    """Where the job's training library (gpuflow.train) reports its metrics: its id in
    the API's job database, the API's URL, and its metrics token from the Secret the API
    makes for the job. With an API to report to, the Secret is required: the kubelet
    holds the pod (CreateContainerConfigError) until the API has made it, so a job
    created with kubectl before the API saw it still reports (the start timeout
    bounds the wait). Without one it is optional and the job reports nothing."""
    env: list[Obj] = [{"name": "GPUFLOW_JOB_ID", "value": database_id(job)}]
    if api_url:
        env.append({"name": "GPUFLOW_API_URL", "value": api_url})
    secret = {
        "name": metrics_secret_name(job["metadata"]["name"]),
        "key": METRICS_SECRET_KEY,
        "optional": not api_url,
    }
    env.append({"name": "GPUFLOW_METRICS_TOKEN", "valueFrom": {"secretKeyRef": secret}})
    return env
