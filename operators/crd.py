"""The DLJob custom resource: its API names, and the labels, annotations and finalizer
the operator and node agent put on Kubernetes objects.

The CRD manifest itself is `helm/gpuflow/crds/dljob.yaml` (applied with kubectl or
Helm; the Quota's is quota.yaml next to it, and the deprecated Queue's queue.yaml);
`load_crd_manifest` reads them for tests and for `gpuflow operator run --install-crd`.
Everything in gpuflow that names a DLJob field, label or annotation takes the name from
here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

GROUP = "gpuflow.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DLJob"
PLURAL = "dljobs"
SHORT_NAME = "dlj"

# Finalizer on every DLJob: the operator removes it once the job's pods are gone, so
# that no pod of a deleted job still holds a GPU the operator thinks is free.
FINALIZER = f"{GROUP}/cleanup"

# Labels on worker pods and services (label selectors find a job's pods).
LABEL_JOB = f"{GROUP}/job"
LABEL_ATTEMPT = f"{GROUP}/attempt"  # 1 for the first start, +1 per restart
LABEL_MANAGED = f"{GROUP}/managed-by"
MANAGER = "gpuflow-operator"

# Annotations on worker pods: the operator's whole record of an allocation, read back
# after a restart (JSON list of {node, gpu, uuid, fraction}).
ANN_ALLOCATION = f"{GROUP}/allocation"
ANN_RANK = f"{GROUP}/rank"
ANN_WORLD_SIZE = f"{GROUP}/world-size"
ANN_GPU_MEM_MIB = f"{GROUP}/gpu-mem-mib"
ANN_STARTED_AT = f"{GROUP}/started-at"
# The batch size the policy chose for a job, on its worker pods: set at creation and
# patched on running pods when a policy changes it; the worker reads it from the
# downward-API file PODINFO_DIR/annotations without a restart.
ANN_BATCH_SIZE = f"{GROUP}/batch-size"
# The egress rate a running pod's node enforces for it (Gbit/s, a decimal string): the
# network allocator's rate for the pod's job (operators/network/__init__.py), patched by the
# operator when it changes; the node agent shapes the pod's traffic to it with HTB.
ANN_EGRESS_GBPS = f"{GROUP}/egress-gbps"
# A running job's communication slot (a network policy's time-shift, issue 19): the
# period of the shared cycle and the job's offset in it, seconds on the wall clock
# (decimal strings); gpuflow.train.commslot holds each all-reduce to the slot. Read
# from the same downward-API file as the batch size. Written by the operator under
# `--network cassini` (operators/network/phases.py).
ANN_COMM_PERIOD_S = f"{GROUP}/comm-period-s"
ANN_COMM_OFFSET_S = f"{GROUP}/comm-offset-s"
# Under a phase network (cassini, crux) a pod's HTB class is guaranteed this floor
# (Gbit/s) and borrows up to egress-gbps; under crux it has the job's priority level
# (0 the lowest, controller.network.phases.crux.PRIORITY_LEVELS - 1 the highest), which the
# node agent makes the class's HTB prio (operators/agent/bandwidth.py).
ANN_EGRESS_FLOOR_GBPS = f"{GROUP}/egress-floor-gbps"
ANN_NET_PRIORITY = f"{GROUP}/net-priority"
PODINFO_VOLUME = "gpuflow-podinfo"
PODINFO_DIR = "/etc/gpuflow/podinfo"

# Annotations and labels the node agent publishes on its Node.
ANN_NODE_GPUS = f"{GROUP}/gpus"  # static: models, UUIDs, topology, NUMA (JSON)
ANN_NODE_GPU_STATUS = f"{GROUP}/gpu-status"  # changing: health, utilisation (JSON)
# What the agent's HTB enforcer holds now, {pod "ns/name": Gbit/s} (JSON), and tc's
# error when its last apply failed (absent otherwise); rewritten only when they change.
ANN_NODE_EGRESS_APPLIED = f"{GROUP}/egress-applied"
ANN_NODE_EGRESS_ERROR = f"{GROUP}/egress-error"
# The pods whose classes borrow, {pod: {"floor_gbps": x, "priority": level or null}}
# (JSON), as the agent applied them; rewritten with egress-applied.
ANN_NODE_EGRESS_CLASSES = f"{GROUP}/egress-classes"
# An admin's drain (who and when): the operator preempts the node's jobs gracefully and
# removes it once none is left; the Node stays cordoned (spec.unschedulable).
ANN_NODE_DRAIN = f"{GROUP}/drain"
# The Node condition the agent sets: True when its GPU is not in gpuflow's GPU
# catalogue and the published speed was derived from what NVML reports
# (operators/agent/discovery.py), False when the catalogue has it. Named as
# node-problem-detector's conditions are: the problem is the type, True means present.
CONDITION_GPU_UNKNOWN = "GpuModelUnknown"
LABEL_RACK = f"{GROUP}/rack"
# The agent's labels: GPU Feature Discovery's names under gpuflow's own prefix, so
# that the two can run side by side without overwriting each other's labels.
LABEL_GPU_COUNT = f"{GROUP}/gpu.count"
LABEL_GPU_PRODUCT = f"{GROUP}/gpu.product"
LABEL_GPU_MEMORY = f"{GROUP}/gpu.memory"

# The extended resources a worker pod requests for its GPUs (docs/helm.md, "GPUs as
# the kubelet counts them"): whole GPUs as the NVIDIA device plugin publishes them, and
# shares of GPUs, which no device plugin can express, in hundredths of a GPU (the
# unit of MPS' CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), published by the node agent.
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_GPU_SHARE = f"{GROUP}/gpu-share"
GPU_SHARE_UNITS = 100  # RESOURCE_GPU_SHARE per GPU

CRD_PATH = Path(__file__).resolve().parent.parent / "helm" / "gpuflow" / "crds" / "dljob.yaml"

# The cluster-scoped Quota: a node of the quota tree (operators/quotas/tree.py,
# docs/quotas.md). Kueue's word: the tree is quotas, the waiting jobs are the order.
QUOTA_KIND = "Quota"
QUOTA_PLURAL = "quotas"
QUOTA_CRD_PATH = CRD_PATH.with_name("quota.yaml")
# The Quota's former kind, Queue (queues.gpuflow.dev), with the same spec and status:
# read for one release beside Quotas (a Quota wins over a Queue of the same name), its
# CRD version marked deprecated so that the API server warns every client that uses
# it; `gpuflow quotas migrate` copies Queue objects to Quotas (operators/quotas/migrate.py).
LEGACY_QUEUE_KIND = "Queue"
LEGACY_QUEUE_PLURAL = "queues"
LEGACY_QUEUE_CRD_PATH = CRD_PATH.with_name("queue.yaml")


def load_crd_manifest(path: Path = CRD_PATH) -> dict[str, Any]:
    """The CustomResourceDefinition of DLJob (or of Quota at QUOTA_CRD_PATH, of the
    deprecated Queue at LEGACY_QUEUE_CRD_PATH), as a dict ready to create."""
    with path.open(encoding="utf-8") as f:
        doc: dict[str, Any] = yaml.safe_load(f)
    return doc
