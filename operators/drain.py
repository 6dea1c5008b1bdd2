"""An admin's drain of a Node, carried out by the operator.

Called by KubeBackend.sync() each round, after the lifecycle has settled the pods.
A Node with the `gpuflow.dev/drain` annotation (set by the API, api/cluster_mode/node_admin.py,
with `spec.unschedulable`) is draining: every job running on it is preempted
gracefully, as a policy's PREEMPT is (its pods deleted with their grace period, so
that the workers checkpoint and exit 75), with a reason naming the node and who
drained it; it queues again and the policy places it elsewhere, since the node is
cordoned (operators/nodes.py). Once no unfinished pod of a job is left on the node,
the annotation is removed: the node is then just cordoned, until an uncordon.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from operators import crd
from operators.jobs import JobRecord, State
from operators.kube import API_ERRORS, KubeApi, Obj, error_message
from operators.lifecycle import Lifecycle
from operators.nodes import ClusterView
from operators.pods import finished

log = logging.getLogger(__name__)


class Drainer:
    def __init__(self, api: KubeApi, lifecycle: Lifecycle) -> None:
        self.api = api
        self.lifecycle = lifecycle

    def drain(
        self,
        records: Mapping[str, JobRecord],
        view: ClusterView,
        pods: Iterable[Obj],
        now: float,
        leading: bool,
    ) -> None:
        """Preempt the jobs running on draining nodes; end the drains that are done."""
        if not view.draining:
            return
        names = {view.cluster.nodes[i].name: by for i, by in view.draining.items()}
        holding = (State.RUNNING, State.STARTING)  # a starting job was given GPUs there
        for rec in sorted(records.values(), key=lambda r: r.key):
            if rec.state not in holding:
                continue
            on = sorted({s.node for s in rec.shares} & names.keys())
            if on:
                self.lifecycle.drain(rec, on[0], _who(names[on[0]]), now)
        busy = {_node_of(p) for p in pods if _job_pod(p) and not finished(p)}
        busy.update(s.node for r in records.values() if r.state in holding for s in r.shares)
        for name in sorted(names.keys() - busy):
            if leading:
                self._done(name)

    def _done(self, name: str) -> None:
        patch = {"metadata": {"annotations": {crd.ANN_NODE_DRAIN: None}}}
        try:
            self.api.patch_node(name, patch)
        except API_ERRORS as exc:
            log.warning("node %s drained, annotation not removed: %s", name, error_message(exc))
        else:
            log.info("node %s drained; it stays cordoned", name)


def _who(value: str) -> str:
    """The admin named in the annotation ("alice at 2026-01-01T00:00:00Z")."""
    return value.split(" at ", 1)[0] or "an admin"


def _job_pod(pod: Obj) -> bool:
    labels: dict[str, Any] = pod["metadata"].get("labels") or {}
    return crd.LABEL_JOB in labels


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")
