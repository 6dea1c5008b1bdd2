"""Quota resources to the quota tree (operators/quotas/tree.py) and the calls on
them (operators/quotas/resources.py), against the real control plane (and a server without
the Quota CRD, the test server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.model.quotas import GpuQuota
from operators.kube import KubeApi
from operators.quotas.resources import QuotaApi
from operators.quotas.tree import QuotaReader, quota_data, quota_object, read_tree
from tests.kube.fixtures import KubeServer
from tests.operators.real_cluster import RealCluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quotas.yaml"


def example() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(EXAMPLE.read_text()))


def test_the_example_is_a_tree_of_one_organisation_and_three_teams() -> None:
    got = read_tree(example())
    assert got.invalid == {} and got.tree is not None
    tree = got.tree
    assert [leaf.name for leaf in tree.leaves()] == ["team-a", "team-b", "team-c"]
    assert tree.chain("team-b") == ["team-b", "research"]
    assert tree.node("team-b").limit == GpuQuota.of(96)  # type: ignore[union-attr]
    assert tree.node("team-b").weight == 2.0  # type: ignore[union-attr]
    assert tree.leaf_for_tenant("vision") == "team-a"
    assert tree.leaf_for_tenant("team-c") == "team-c"  # a leaf's tenants default to its name


def test_per_model_quotas_round_trip() -> None:
    item = {"name": "a", "guarantee": {"A100": 8, "V100": 4}, "limit": {"A100": 16}}
    obj = quota_object(item)
    assert obj["spec"] == {"guaranteeByModel": {"A100": 8, "V100": 4}, "limitByModel": {"A100": 16}}
    assert quota_data(obj) == item


@pytest.mark.parametrize(
    ("change", "culprit", "message"),
    [
        ({"team-c": {"guarantee": 60}}, "research", "spec: guarantees add up to 162"),
        ({"team-b": {"parent": "nowhere"}}, "team-b", "spec.parent: no quota named 'nowhere'"),
        ({"team-c": {"tenants": ["vision"]}}, "team-c", "spec.tenants: tenant 'vision'"),
        ({"team-a": {"limit": 8}}, "team-a", "spec.limit: 8 is below the guarantee 64"),
    ],
)
def test_a_broken_tree_names_the_quota_and_field(
    change: dict[str, dict[str, Any]], culprit: str, message: str
) -> None:
    objs = example()
    for obj in objs:
        obj["spec"].update(change.get(obj["metadata"]["name"], {}))
    got = read_tree(objs)
    assert got.tree is None
    assert list(got.invalid) == [culprit]
    assert got.invalid[culprit].startswith(message), got.invalid


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_calls_and_the_reader_keep_the_last_valid_tree(gpu_cluster: RealCluster) -> None:
    quotas = QuotaApi(gpu_cluster.api)
    reader = QuotaReader(gpu_cluster.api, every_s=0)
    assert reader.read() is None  # no Quota: no quotas
    for obj in example():
        quotas.create(obj)
    tree = reader.read()
    assert tree is not None and tree.names() == ["research", "team-a", "team-b", "team-c"]
    got = quotas.get("team-c")
    assert got is not None and got["spec"]["weight"] == 1  # the schema's default
    got["spec"]["guarantee"] = 100  # over the parent's 128 with its siblings
    quotas.replace(got)
    assert reader.read() is tree  # the broken tree is not applied
    assert reader.invalid == {
        "research": "spec: guarantees add up to 202, more than the parent's 128"
    }
    got = quotas.get("team-c")
    assert got is not None
    got["status"] = {"phase": "Active", "allocatedGpus": 3}
    assert quotas.replace_status(got)["status"]["allocatedGpus"] == 3
    assert quotas.delete("team-c") is True
    assert quotas.delete("team-c") is False
    assert quotas.get("team-c") is None
    assert reader.read() is not tree and reader.invalid == {}


def test_no_crd_means_no_quotas(kube_server: KubeServer) -> None:
    reader = QuotaReader(KubeApi(kube_server.api_client()), every_s=0)
    assert reader.read() is None and reader.invalid == {}
