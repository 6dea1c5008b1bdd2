"""The DLJob made for a REST submission in cluster mode: its name and manifest.

Called by api.cluster_mode.backend.ClusterModeBackend.accept (the service's tests read the manifests
back from the test Kubernetes API server, tests/api/test_cluster_mode.py).
"""

from __future__ import annotations

import re
from typing import Any

from api.schemas.jobs import JobCreate
from controller.model.precision import DEFAULT_PRECISION
from operators import crd
from operators.dljobs.resources import LABEL_JOB_ID, LABEL_TENANT, MAX_NAME_LEN
from operators.kube import Obj


def dljob_name(name: str, job_id: str) -> str:
    """A DNS-1123 name, unique by the job id, short enough for the operator's pods."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    room = MAX_NAME_LEN - len(job_id) - 1
    slug = slug[:room].strip("-") or "job"
    return f"{slug}-{job_id}"


def label_value(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return out.strip("-_.") or "none"


def dljob_manifest(job: dict[str, Any], body: JobCreate, image: str) -> Obj:
    spec: dict[str, Any] = {
        "image": image,
        "gpus": job["num_gpus"],
        "tenant": job["tenant"],
        "priority": job["priority"],
        "model": job["model"],
    }
    if body.command:
        spec["command"] = list(body.command)
    if body.env:
        spec["env"] = [{"name": k, "value": v} for k, v in body.env.items()]
    if job["min_gpus"] != job["num_gpus"]:
        spec["minGpus"] = job["min_gpus"]
    if job["max_gpus"] != job["num_gpus"]:
        spec["maxGpus"] = job["max_gpus"]
    if job["gpu_mem_mib"] is not None:
        spec["gpuMemMib"] = job["gpu_mem_mib"]
    if job["batch_size"] is not None:
        spec["batchSize"] = job["batch_size"]
    if job["precision"] != DEFAULT_PRECISION:
        spec["precision"] = str(job["precision"])
    if job["duration_s"] is not None:
        spec["expectedDurationSeconds"] = job["duration_s"]
    if job.get("deadline_s") is not None:
        spec["deadlineSeconds"] = job["deadline_s"]
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {
            "name": job["dljob_name"],
            "namespace": job["dljob_namespace"],
            "labels": {LABEL_TENANT: label_value(job["tenant"]), LABEL_JOB_ID: job["id"]},
        },
        "spec": spec,
    }
