"""Cluster mode's cordon, drain and uncordon: patches of the Kubernetes Node.

Called by api.cluster_mode.backend.ClusterModeBackend.maintain_node (POST
/nodes/{name}/cordon|drain| uncordon). A cordon sets `spec.unschedulable`, exactly what `kubectl
cordon` sets, so that kubectl and the API agree; a drain adds the `gpuflow.dev/drain` annotation
(who and when), on which the operator preempts the node's jobs gracefully and which it
removes once none is left (operators/drain.py); an uncordon clears both. The patches
are JSON merge patches (RFC 7386: null deletes a key) through the official client.
"""

from __future__ import annotations

from api.backends import BackendUnavailable, UnknownNode
from controller.maintenance import NodeAction
from operators import crd
from operators.kube import API_ERRORS, KubeApi, Obj, error_message, status_code
from operators.kube.times import format_time


def node_patch(action: NodeAction, by: str, now_s: float) -> Obj:
    """The merge patch that carries out `action` by admin `by` at `now_s` (epoch s)."""
    if action is NodeAction.UNCORDON:
        return {
            "spec": {"unschedulable": None},
            "metadata": {"annotations": {crd.ANN_NODE_DRAIN: None}},
        }
    patch: Obj = {"spec": {"unschedulable": True}}
    if action is NodeAction.DRAIN:
        patch["metadata"] = {"annotations": {crd.ANN_NODE_DRAIN: f"{by} at {format_time(now_s)}"}}
    return patch


def patch_node(api: KubeApi, name: str, action: NodeAction, by: str, now_s: float) -> Obj:
    """Patch the Node; the Node afterwards. UnknownNode if there is none such,
    BackendUnavailable if the API server refuses or cannot be reached."""
    try:
        return api.patch_node(name, node_patch(action, by, now_s))
    except API_ERRORS as exc:
        if status_code(exc) == 404:
            raise UnknownNode(name) from None
        raise BackendUnavailable(f"Kubernetes API: {error_message(exc)}") from None
