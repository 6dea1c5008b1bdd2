"""The chart's operator ClusterRole is what the operator calls, no more and no less.

Every request the operator makes goes through `KubeCalls._call(verb, resource)`
(operators/kube/calls.py); the test records those of one operator running a
scenario that reaches each of its writers (jobs started, reported, spread over two
nodes so that the fair network annotates their pods, a drained node, a quota tree of a
Quota and a Queue not yet migrated, a deleted job, a policy switch), adds the calls
made only on an error path, and compares them with the ClusterRole the chart renders.
A verb the code needs and the role lacks is a 403 on a real cluster (issue 25: `patch`
on pods, which every live batch size, egress rate and communication slot needs); one
the role grants that nothing calls is a grant too many.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from operators import crd
from operators.kube import KubeApi
from operators.kube.leader import LeaseConfig
from operators.operator import Operator, OperatorConfig
from operators.policy_config import read_running, write_policy
from operators.quotas.resources import QuotaApi, legacy
from tests.helm.chart import Manifests, bound_role, name, rules_of
from tests.operators.builders import make_dljob
from tests.operators.conftest import gpu_cluster
from tests.operators.harness import wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for

__all__ = ["gpu_cluster"]

GROUPS = {
    "dljobs": crd.GROUP,
    "quotas": crd.GROUP,
    "queues": crd.GROUP,
    "leases": "coordination.k8s.io",
}
# Calls made only when something fails, which the scenario need not meet:
# (group, resource, verb) -> where.
ERROR_PATHS = {
    ("gpuflow.dev", "dljobs", "get"): "re-read after a 409 on a status write "
    "(KubeApi.update_status)",
    ("coordination.k8s.io", "leases", "create"): "a Lease that does not exist yet "
    "(the scenario's operator may find it made)",
}


def group_of(resource: str) -> str:
    return GROUPS.get(resource.split("/")[0], "")


class RecordingApi(KubeApi):
    """A KubeApi that records each call's (group, resource, verb)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.calls: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def _call(self, verb: str, resource: str) -> AbstractContextManager[None]:
        with self._lock:
            self.calls.add((group_of(resource), resource, verb))
        return self._recorded(verb, resource)

    @contextmanager
    def _recorded(self, verb: str, resource: str) -> Iterator[None]:
        with super()._call(verb, resource):
            yield


def granted(m: Manifests) -> set[tuple[str, str, str]]:
    rules = rules_of(bound_role(m, name("operator")))
    return {(group, res, verb) for (group, res), verbs in rules.items() for verb in verbs}


@pytest.mark.parametrize("gpu_cluster", [2], indirect=True)
def test_the_operator_role_is_exactly_what_the_operator_calls(
    gpu_cluster: RealCluster, render: Callable[..., Manifests]
) -> None:
    api = gpu_cluster.api
    QuotaApi(api).create(
        {"apiVersion": crd.API_VERSION, "kind": crd.QUOTA_KIND,
         "metadata": {"name": "default"}, "spec": {"guarantee": 16}}
    )  # fmt: skip
    # A Queue not yet migrated (the deprecated kind): read and its status written too.
    legacy(api).create(
        {"apiVersion": crd.API_VERSION, "kind": crd.LEGACY_QUEUE_KIND,
         "metadata": {"name": "old"}, "spec": {"guarantee": 0}}
    )  # fmt: skip
    recording = RecordingApi(gpu_cluster.client)
    config = OperatorConfig(
        identity="rbac-test",
        policy="fifo",
        interval_s=0.5,
        watch_timeout_s=5,
        lease=LeaseConfig(lease_duration_s=2.0, renew_deadline_s=1.5, retry_s=0.25),
    )
    op = Operator(recording, config)
    thread = threading.Thread(target=op.run, daemon=True)
    kubelet = Kubelet(gpu_cluster.client, time_scale=1000).start()  # jobs run "for ever"
    try:
        thread.start()
        api.create_dljob("default", make_dljob("wide", 12))  # two pods, one a node
        wait_phases(api, "Running", ["wide"])
        api.create_dljob("default", make_dljob("gone", 1, duration_s=600))
        wait_phases(api, "Running", ["gone"])

        def annotated() -> bool:
            pods = api.core.list_namespaced_pod("default").items
            return any(crd.ANN_EGRESS_GBPS in (p.metadata.annotations or {}) for p in pods)

        wait_for("the fair network's egress rates on the pods", annotated, 30)
        api.delete_dljob("default", "gone")  # its finalizer comes off
        # An admin's switch: the operator, which created the policy ConfigMap to say
        # what it runs, rewrites it with the new policy.
        op.policy_watch.every_s = 0.1
        wait_for("the running policy said", lambda: read_running(api, "default") is not None, 30)
        write_policy(api, "default", "srtf")
        wait_for("srtf said", lambda: getattr(read_running(api, "default"), "name", "") == "srtf",
                 30)  # fmt: skip
        api.patch_node("node-1", {"metadata": {"annotations": {crd.ANN_NODE_DRAIN: "admin"}}})
        wait_for(
            "the drain done",
            lambda: crd.ANN_NODE_DRAIN not in (api.get_node("node-1")["metadata"].get(
                "annotations") or {}),
            30,
        )  # fmt: skip
        quotas, queues = QuotaApi(api), legacy(api)
        wait_for("the quota's status", lambda: (quotas.get("default") or {}).get("status"), 30)
        wait_for("the old queue's status", lambda: (queues.get("old") or {}).get("status"), 30)
        wait_for("a lease renewal", lambda: ("coordination.k8s.io", "leases", "update")
                 in recording.calls, 10)  # fmt: skip
    finally:
        op.stop()
        thread.join(timeout=10)
        kubelet.stop()
    needed = recording.calls | ERROR_PATHS.keys()
    role = granted(render())
    assert needed - role == set(), "called but not granted"
    assert role - needed == set(), "granted but never called"
