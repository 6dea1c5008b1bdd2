"""Queue trees from YAML (controller.quotas.spec): both forms, every fault named."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model.quotas import QuotaSpecError
from controller.quotas.spec import load_quotas, quotas_from_data

ISSUE_FORM = """
queues:
  - {name: team-a, guarantee: 64, weight: 1, tenants: [team-a]}
  - {name: team-b, guarantee: 38, limit: 96, weight: 2}
"""


def test_the_issues_form_loads(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(ISSUE_FORM)
    tree = load_quotas(path)
    a, b = tree.leaves()
    assert (a.name, a.guarantee.total, a.limit, a.weight, a.tenants) == (
        "team-a",
        64,
        None,
        1.0,
        ("team-a",),
    )
    assert (b.guarantee.total, b.limit.total if b.limit else None, b.weight, b.tenants) == (
        38,
        96,
        2.0,
        ("team-b",),
    )


def test_nested_and_parent_forms_build_the_same_tree() -> None:
    nested = quotas_from_data(
        {
            "queues": [
                {
                    "name": "org",
                    "children": [
                        {"name": "a", "guarantee": {"A100": 8}},
                        {"name": "b", "guarantee": {"A100": 4, "V100": 2}},
                    ],
                }
            ]
        }
    )
    flat = quotas_from_data(
        [
            {"name": "a", "parent": "org", "guarantee": {"A100": 8}},
            {"name": "org"},
            {"name": "b", "parent": "org", "guarantee": {"A100": 4, "V100": 2}},
        ]
    )
    assert nested == flat
    # An inner queue without a guarantee gets its children's together.
    assert nested.roots[0].guarantee.by_model == (("A100", 12), ("V100", 2))
    assert nested.chain("b") == ["b", "org"]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"queue": []}, "queue", "unknown key"),
        ({"queues": []}, "queues", "non-empty list"),
        ({"queues": ["a"]}, "queues[0]", "mapping"),
        ({"queues": [{"guarantee": 3}]}, "queues[0].name", "non-empty string"),
        ({"queues": [{"name": "a", "limt": 3}]}, "queues[0].limt", "unknown key"),
        ({"queues": [{"name": "a", "guarantee": -1}]}, "queues[0].guarantee", ">= 0"),
        ({"queues": [{"name": "a", "guarantee": 1.5}]}, "queues[0].guarantee", "whole number"),
        ({"queues": [{"name": "a", "guarantee": True}]}, "queues[0].guarantee", "number"),
        (
            {"queues": [{"name": "a", "guarantee": {"A100": -2}}]},
            "queues[0].guarantee.A100",
            ">= 0",
        ),
        ({"queues": [{"name": "a", "weight": "x"}]}, "queues[0].weight", "number"),
        ({"queues": [{"name": "a", "tenants": "a"}]}, "queues[0].tenants", "list"),
        ({"queues": [{"name": "a", "children": {}}]}, "queues[0].children", "list"),
        ({"queues": [{"name": "a", "parent": "zz"}]}, "queues[0].parent", "no quota named 'zz'"),
        (
            {"queues": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]},
            "queues[0].parent",
            "own ancestor",
        ),
        (
            {"queues": [{"name": "a", "children": [{"name": "b", "parent": "c"}]}]},
            "queues[0].children[0].parent",
            "nested",
        ),
        (
            {"queues": [{"name": "a"}, {"name": "b", "children": [{"name": "a"}]}]},
            "queues[1].children[0].name",
            "twice",
        ),
        # A fault found in the built tree is named where the input put the queue.
        (
            {
                "queues": [
                    {"name": "org", "guarantee": 4},
                    {"name": "x", "parent": "org", "guarantee": 2},
                    {"name": "y", "parent": "org", "guarantee": 2, "limit": 1},
                ]
            },
            "queues[2].limit",
            "below the guarantee",
        ),
        # Bounded: a finite weight, at most the largest cluster's GPUs.
        ({"queues": [{"name": "a", "weight": float("inf")}]}, "queues[0].weight", "finite"),
        ({"queues": [{"name": "a", "weight": 1e7}]}, "queues[0].weight", "<= 1e+06"),
        ({"queues": [{"name": "a", "guarantee": 10**23}]}, "queues[0].guarantee", "<= 100000"),
        ({"queues": [{"name": "a", "limit": {"A100": 10**23}}]}, "queues[0].limit.A100", "<= 1"),
    ],
)
def test_bad_data_is_refused_naming_the_field(data: object, field: str, words: str) -> None:
    with pytest.raises(QuotaSpecError) as err:
        quotas_from_data(data)
    assert err.value.field == field
    assert words in err.value.message


@pytest.mark.parametrize(
    ("text", "words"),
    [("queues: [", "not YAML at line"), (b"\xff\xfe", "not UTF-8")],
)
def test_bad_files_are_refused_with_their_name(
    tmp_path: Path, text: str | bytes, words: str
) -> None:
    path = tmp_path / "q.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(QuotaSpecError) as err:
        load_quotas(path)
    assert str(err.value).startswith(f"{path}: file: ")
    assert words in str(err.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(QuotaSpecError, match=r"no-such\.yaml: file: cannot read"):
        load_quotas(tmp_path / "no-such.yaml")
