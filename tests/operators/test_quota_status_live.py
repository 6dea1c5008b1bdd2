"""The operator reads the Quota resources each round and writes each one's status:
GPUs its jobs hold, how many over its guarantee, its waiting jobs by reason; a tree
that breaks a rule marks the quota at fault Invalid, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from operators import crd
from operators.quotas.resources import QuotaApi
from tests.operators.builders import make_dljob
from tests.operators.harness import running_operator, wait_phases
from tests.operators.kubelet import Kubelet
from tests.operators.real_cluster import RealCluster
from tests.waiting import wait_for


def quota(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": crd.QUOTA_KIND, "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def tenant_job(name: str, tenant: str, gpus: int) -> dict[str, Any]:
    job = make_dljob(name, gpus, duration_s=3600)
    job["spec"]["tenant"] = tenant
    return job


@pytest.mark.parametrize("gpu_cluster", [1], indirect=True)
def test_quota_status_follows_the_jobs(gpu_cluster: RealCluster) -> None:
    api, quotas = gpu_cluster.api, QuotaApi(gpu_cluster.api)
    quotas.create(quota("org", guarantee=8))
    quotas.create(quota("team-a", parent="org", guarantee=4))
    quotas.create(quota("team-b", parent="org", guarantee=4))
    kubelet = Kubelet(gpu_cluster.client, time_scale=1).start()
    try:
        with running_operator(gpu_cluster.client):
            api.create_dljob("default", tenant_job("a1", "team-a", 6))
            wait_phases(api, "Running", ["a1"])
            api.create_dljob("default", tenant_job("b1", "team-b", 4))

            def statuses() -> dict[str, Any] | None:
                got = {
                    n: (quotas.get(n) or {}).get("status") or {}
                    for n in ("org", "team-a", "team-b")
                }
                return got if got["team-b"].get("pendingJobs") == 1 else None

            got = wait_for("team-b's status", statuses, 60, 0.1)
            a, b, org = got["team-a"], got["team-b"], got["org"]
            assert (a["phase"], a["allocatedGpus"], a["borrowedGpus"]) == ("Active", 6, 2)
            assert (b["allocatedGpus"], b["borrowedGpus"], sum(b["pendingByReason"].values())) == (
                0,
                0,
                1,
            )
            assert (org["allocatedGpus"], org["borrowedGpus"], org["guaranteeGpus"]) == (6, 0, 8)
            # A change that breaks the tree: the quota at fault is Invalid, by field.
            bad = quotas.get("team-b")
            assert bad is not None
            bad["spec"]["guarantee"] = 6
            quotas.replace(bad)

            def invalid() -> dict[str, Any] | None:
                status = (quotas.get("org") or {}).get("status") or {}
                return status if status.get("phase") == "Invalid" else None

            status = wait_for("org Invalid", invalid, 60, 0.1)
            assert status["message"] == "spec: guarantees add up to 10, more than the parent's 8"
    finally:
        kubelet.stop()
