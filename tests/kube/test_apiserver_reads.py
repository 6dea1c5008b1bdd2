"""The test API server's reads: label and field selectors, pagination, tables."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer
from tests.kube.conftest import (
    NS,
    create_job,
    names,
    raw,
    status_of,
)
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    make_event,
    make_pod,
)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=x", ["a", "b"]),
        ("app==x", ["a", "b"]),
        ("app!=x", ["c", "d"]),
        ("tier in (gpu,cpu)", ["a", "c"]),
        ("tier notin (gpu)", ["b", "c", "d"]),
        ("tier", ["a", "c"]),
        ("!tier", ["b", "d"]),
        ("app=x,tier=gpu", ["a"]),
    ],
)
def test_label_selectors(core: Any, selector: str, expected: list[str]) -> None:
    for name, labels in [
        ("a", {"app": "x", "tier": "gpu"}),
        ("b", {"app": "x"}),
        ("c", {"app": "y", "tier": "cpu"}),
        ("d", {}),
    ]:
        core.create_namespaced_pod(NS, make_pod(name, labels))
    assert names(core.list_namespaced_pod(NS, label_selector=selector).items) == expected


def test_field_selectors(core: Any) -> None:
    core.create_namespaced_pod(NS, make_pod("a", node="n1"))
    core.create_namespaced_pod(NS, make_pod("b", node="n2"))
    core.create_namespaced_pod(NS, make_pod("c"))
    core.patch_namespaced_pod_status("b", NS, {"status": {"phase": "Running"}})
    assert names(core.list_namespaced_pod(NS, field_selector="spec.nodeName=n1").items) == ["a"]
    assert names(core.list_namespaced_pod(NS, field_selector="spec.nodeName=").items) == ["c"]
    assert names(
        core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Pending,metadata.namespace=default"
        ).items
    ) == ["b"]
    assert names(core.list_namespaced_pod(NS, field_selector="metadata.name=c").items) == ["c"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, field_selector="spec.image=busybox")
    assert err.value.status == 400
    assert status_of(err.value)["message"] == "field label not supported: spec.image"


def test_event_field_selectors_find_events_about_an_object(core: Any, custom: Any) -> None:
    job = create_job(custom, "a")
    other = create_job(custom, "b")
    core.create_namespaced_event(NS, make_event("a.1", job, "Pending", "no GPUs"))
    core.create_namespaced_event(NS, make_event("b.1", other, "Admitted", "placed"))
    selector = (
        f"involvedObject.name=a,involvedObject.namespace={NS},"
        f"involvedObject.kind=DLJob,involvedObject.uid={job['metadata']['uid']}"
    )
    events = core.list_namespaced_event(NS, field_selector=selector).items
    assert [e.reason for e in events] == ["Pending"]


def test_pagination_with_limit_and_continue(core: Any) -> None:
    for i in range(7):
        core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
    first = core.list_namespaced_config_map(NS, limit=3)
    assert names(first.items) == ["c0", "c1", "c2"]
    assert first.metadata.remaining_item_count == 4
    seen = names(first.items)
    token = first.metadata._continue
    while token:
        page = core.list_namespaced_config_map(NS, limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        seen += names(page.items)
        token = page.metadata._continue
    assert seen == [f"c{i}" for i in range(7)]


def test_continue_token_older_than_history_is_410(kube_server: KubeServer, core: Any) -> None:
    for i in range(3):
        core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
    token = core.list_namespaced_config_map(NS, limit=1).metadata._continue
    kube_server.compact()
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(NS, limit=1, _continue=token)
    assert err.value.status == 410 and status_of(err.value)["reason"] == "Expired"


def test_table_output_has_name_printer_columns_and_age(
    kube_server: KubeServer, custom: Any
) -> None:
    create_job(custom, "a", gpus=4)
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "a", {"status": {"phase": "Running"}}
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    code, table = raw(
        kube_server,
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}",
        headers={"Accept": accept},
    )
    assert code == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "GPUS", "STATUS", "AGE"]
    (row,) = table["rows"]
    assert row["cells"][:3] == ["a", 4, "Running"] and row["cells"][3].endswith("s")
    assert row["object"]["kind"] == "PartialObjectMetadata"
