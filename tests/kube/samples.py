"""Builders for the test server's own tests: a DLJob-like CRD, DLJobs, pods, events."""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

GROUP, VERSION, PLURAL = "gpuflow.dev", "v1alpha1", "dljobs"

_DLJOB_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["gpus", "image"],
            "properties": {
                "gpus": {"type": "integer", "minimum": 1, "maximum": 64},
                "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                "queue": {"type": "string", "default": "default"},
                "priority": {
                    "type": "string",
                    "enum": ["low", "normal", "high"],
                    "default": "normal",
                },
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "hints": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "conditions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "status"],
                        "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string"},
                            "reason": {"type": "string"},
                            "message": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}


def dljob_crd(
    scope: str = "Namespaced", plural: str = PLURAL, kind: str = "DLJob", short_name: str = "dlj"
) -> Obj:
    """A small CRD shaped like gpuflow's DLJob: printer columns, status, schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "shortNames": [short_name],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "GPUS", "type": "integer", "jsonPath": ".spec.gpus"},
                        {"name": "STATUS", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": copy.deepcopy(_DLJOB_SCHEMA)},
                }
            ],
        },
    }


def make_dljob(
    name: str,
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    **spec: Any,
) -> Obj:
    metadata: Obj = {"name": name}
    if labels:
        metadata["labels"] = labels
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DLJob",
        "metadata": metadata,
        "spec": {"gpus": gpus, "image": "pytorch:2.3", **spec},
    }


def make_pod(
    name: str, labels: dict[str, str] | None = None, node: str = "", owner: Obj | None = None
) -> Obj:
    metadata: Obj = {"name": name, "labels": labels or {}}
    if owner is not None:
        metadata["ownerReferences"] = [owner_ref(owner)]
    spec: Obj = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "env": [{"name": "RANK", "value": "0"}],
                "ports": [{"containerPort": 29500}],
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def make_event(name: str, about: Obj, reason: str, message: str) -> Obj:
    meta = about["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {
            "apiVersion": about["apiVersion"],
            "kind": about["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "gpuflow-operator"},
        "firstTimestamp": meta["creationTimestamp"],
        "lastTimestamp": meta["creationTimestamp"],
        "count": 1,
    }
