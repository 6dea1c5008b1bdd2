"""The operator's reader hands the controller a `Quotas` for the tree the Quotas make:
none without Quotas, the same one while the tree stands (a status write changes no
spec), a new one when an admin changes a quota, the last valid one while the tree is
broken, none again when the Quotas are gone."""

from __future__ import annotations

from typing import Any

import pytest

from operators import crd
from operators.dljobs.resources import DEFAULT_GRACE_S
from operators.quotas.resources import QuotaApi
from operators.quotas.tree import QuotaReader
from tests.operators.real_cluster import RealCluster


def quota(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": crd.QUOTA_KIND, "metadata": {"name": name},
            "spec": spec}  # fmt: skip


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_the_quotas_follow_the_tree(gpu_cluster: RealCluster) -> None:
    quotas = QuotaApi(gpu_cluster.api)
    reader = QuotaReader(gpu_cluster.api, every_s=0)
    reader.read()
    assert reader.quotas is None
    quotas.create(quota("org", guarantee=8))
    quotas.create(quota("team-a", parent="org", guarantee=4))
    reader.read()
    first = reader.quotas
    assert first is not None and first.tree == reader.tree and first.grace_s == DEFAULT_GRACE_S
    assert first.ledger is None  # a live operator keeps no per-round record
    obj = quotas.get("team-a")
    assert obj is not None
    quotas.replace_status({**obj, "status": {"phase": "Active", "allocatedGpus": 2}})
    reader.read()
    assert reader.quotas is first  # nothing in the tree changed
    obj = quotas.get("team-a")
    assert obj is not None
    obj["spec"]["guarantee"] = 6
    quotas.replace(obj)
    reader.read()
    second = reader.quotas
    assert second is not None and second is not first
    node = second.tree.node("team-a")
    assert node is not None and node.guarantee.total == 6
    obj = quotas.get("team-a")
    assert obj is not None
    obj["spec"]["guarantee"] = 9  # over org's 8: broken, not applied
    quotas.replace(obj)
    reader.read()
    assert reader.quotas is second and reader.invalid
    assert quotas.delete("team-a") and quotas.delete("org")
    reader.read()
    assert reader.quotas is None and reader.tree is None
