"""The queue tree (controller.model.quotas): lookups, the job -> queue rule, validation."""

from __future__ import annotations

import pytest

from controller.model import JobSpec
from controller.model.quotas import GpuQuota, QuotaNode, QuotaSpecError, QuotaTree


def leaf(name: str, guarantee: int = 0, **kw: object) -> QuotaNode:
    return QuotaNode(name, GpuQuota.of(guarantee), **kw)  # type: ignore[arg-type]


def org() -> QuotaTree:
    return QuotaTree(
        (
            QuotaNode(
                "research",
                GpuQuota.of(100),
                children=(leaf("vision", 60, tenants=("cv", "vision")), leaf("nlp", 40)),
            ),
            leaf("default", 0),
        )
    )


def job(tenant: str = "default", queue: str = "") -> JobSpec:
    return JobSpec("j", 0.0, 1, duration_s=1.0, tenant=tenant, queue=queue)


def test_a_leaf_serves_its_own_name_unless_tenants_are_given() -> None:
    tree = org()
    assert tree.node("nlp") is not None and tree.node("nlp").tenants == ("nlp",)  # type: ignore[union-attr]
    assert tree.node("research").tenants == ()  # type: ignore[union-attr]
    assert [n.name for n in tree.leaves()] == ["vision", "nlp", "default"]
    assert tree.chain("nlp") == ["nlp", "research"]
    assert tree.parent("research") is None


@pytest.mark.parametrize(
    ("tenant", "queue", "expected"),
    [
        ("cv", "", "vision"),  # a listed tenant
        ("nlp", "", "nlp"),  # a leaf's own name
        ("somebody", "", "default"),  # nobody lists it: the default leaf
        ("cv", "nlp", "nlp"),  # the job's own queue wins over its tenant
        ("cv", "research", None),  # an inner queue takes no jobs
        ("cv", "nowhere", None),
    ],
)
def test_a_job_goes_to_its_named_queue_else_its_tenants(
    tenant: str, queue: str, expected: str | None
) -> None:
    assert org().leaf_of(job(tenant, queue)) == expected


def test_without_a_default_leaf_an_unknown_tenant_has_no_queue() -> None:
    tree = QuotaTree((leaf("a", 1),))
    assert tree.leaf_of(job("b")) is None


@pytest.mark.parametrize(
    ("roots", "field", "words"),
    [
        ((leaf("a"), leaf("a")), "queues[1].name", "twice"),
        ((leaf("a", weight=0.0),), "queues[0].weight", "> 0"),
        ((leaf("a", 8, limit=GpuQuota.of(4)),), "queues[0].limit", "below the guarantee 8"),
        (
            (QuotaNode("o", GpuQuota.of(10), children=(leaf("a", 6), leaf("b", 5))),),
            "queues[0].children",
            "add up to 11",
        ),
        (
            (QuotaNode("o", limit=GpuQuota.of(10), children=(leaf("a", limit=GpuQuota.of(12)),)),),
            "queues[0].children[0].limit",
            "above the parent's limit 10",
        ),
        ((leaf("a", tenants=("t",)), leaf("b", tenants=("t",))), "queues[1].tenants", "already"),
        (
            (leaf("a", 2), QuotaNode("b", GpuQuota.of({"A100": 2}))),
            "queues[1].guarantee",
            "mixes",
        ),
        ((QuotaNode("o", tenants=("t",), children=(leaf("a"),)),), "queues[0].tenants", "leaf"),
    ],
)
def test_a_broken_tree_is_refused_naming_the_field(
    roots: tuple[QuotaNode, ...], field: str, words: str
) -> None:
    with pytest.raises(QuotaSpecError) as err:
        QuotaTree(roots)
    assert err.value.field == field
    assert words in err.value.message


def test_per_model_quotas() -> None:
    quota = GpuQuota.of({"V100": 8, "A100": 16})
    assert quota.by_model == (("A100", 16), ("V100", 8))
    assert quota.total == 24 and quota.get("A100") == 16 and quota.get("H100") == 0
    assert not quota.any_model and GpuQuota.of(3).any_model
    tree = QuotaTree((QuotaNode("a", quota),))
    assert tree.per_model and not org().per_model
