"""Cluster mode's quota store (api/quotas/store.py) against the real control plane, in
a cluster that still holds a Queue of the deprecated kind: it reads as a quota, a PUT
of its name migrates it to a Quota, and a DELETE removes both kinds."""

from __future__ import annotations

import pytest

from api.quotas.store import KubeQuotaStore
from operators import crd
from operators.quotas.resources import QuotaApi, legacy
from tests.operators.conftest import gpu_cluster
from tests.operators.real_cluster import RealCluster

__all__ = ["gpu_cluster"]


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_a_write_migrates_an_old_queue(gpu_cluster: RealCluster) -> None:
    api = gpu_cluster.api
    legacy(api).create(
        {"apiVersion": crd.API_VERSION, "kind": crd.LEGACY_QUEUE_KIND,
         "metadata": {"name": "org"}, "spec": {"guarantee": 8}}
    )  # fmt: skip
    store = KubeQuotaStore(api)
    assert store.items() == [{"name": "org", "guarantee": 8, "weight": 1}]
    assert store.put({"name": "team-a", "parent": "org", "guarantee": 4}) is True
    assert [i["name"] for i in store.items()] == ["org", "team-a"]
    # A PUT of the Queue's name: an update (False), now a Quota, the Queue gone.
    assert store.put({"name": "org", "guarantee": 10}) is False
    assert legacy(api).get("org") is None
    assert (QuotaApi(api).get("org") or {})["spec"]["guarantee"] == 10
    legacy(api).create(
        {"apiVersion": crd.API_VERSION, "kind": crd.LEGACY_QUEUE_KIND,
         "metadata": {"name": "org"}, "spec": {"guarantee": 2}}
    )  # fmt: skip
    assert store.items()[0] == {"name": "org", "guarantee": 10, "weight": 1}  # the Quota wins
    assert store.delete("org") is True
    assert legacy(api).get("org") is None and QuotaApi(api).get("org") is None
    assert store.delete("org") is False
