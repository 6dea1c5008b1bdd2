"""The test API server's deletion: finalizers, preconditions, garbage collection
(background, orphan, foreground), namespaces, graceful pod deletion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from tests.kube.conftest import (
    NS,
    Obj,
    create_job,
    get_job,
    names,
    raw,
)
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    make_pod,
    owner_ref,
)


def first_event(list_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    stream = watch.Watch().stream(list_fn, *args, timeout_seconds=5, **kwargs)
    try:
        event: Obj = next(stream)
        return event
    finally:
        stream.close()


def test_finalizers_hold_deletion_until_the_last_is_removed(core: Any, custom: Any) -> None:
    create_job(custom, "a", finalizers=["gpuflow.dev/cleanup", "other/x"])
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    job = get_job(custom, "a")
    assert job["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "a",
            {"metadata": {"finalizers": ["gpuflow.dev/cleanup", "other/x", "new/one"]}},
        )
    assert err.value.status == 422
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"finalizers": ["other/x"]}}
    )
    assert get_job(custom, "a")["metadata"]["finalizers"] == ["other/x"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as gone:
        get_job(custom, "a")
    assert gone.value.status == 404


def test_delete_returns_202_while_finalizers_remain(kube_server: KubeServer, custom: Any) -> None:
    create_job(custom, "a", finalizers=["f"])
    code, body = raw(kube_server, "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/a")
    assert code == 202 and body["metadata"]["deletionTimestamp"]
    create_job(custom, "b")
    code, body = raw(kube_server, "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/b")
    assert code == 200 and body["metadata"]["name"] == "b"


def test_delete_preconditions(core: Any) -> None:
    cm = core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map(
            "c", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-it"))
        )
    assert err.value.status == 409
    core.delete_namespaced_config_map(
        "c",
        NS,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid)),
    )


def test_garbage_collection_of_dependents(core: Any, custom: Any) -> None:
    job = create_job(custom, "a")
    other = create_job(custom, "b")
    core.create_namespaced_pod(NS, make_pod("a-0", owner=job))
    core.create_namespaced_pod(NS, make_pod("a-1", owner=job))
    shared = make_pod("shared", owner=job)
    shared["metadata"]["ownerReferences"].append(owner_ref(other) | {"controller": False})
    core.create_namespaced_pod(NS, shared)
    core.create_namespaced_service(
        NS,
        {
            "metadata": {"name": "a", "ownerReferences": [owner_ref(job)]},
            "spec": {"clusterIP": "None", "ports": [{"port": 29500}]},
        },
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    assert names(core.list_namespaced_pod(NS).items) == ["shared"]
    remaining = core.read_namespaced_pod("shared", NS).metadata.owner_references
    assert [r.name for r in remaining] == ["b"]
    assert core.list_namespaced_service(NS).items == []


def test_gc_waits_for_the_owner_to_really_go(core: Any, custom: Any) -> None:
    job = create_job(custom, "a", finalizers=["f"])
    core.create_namespaced_pod(NS, make_pod("a-0", owner=job))
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a")
    assert names(core.list_namespaced_pod(NS).items) == ["a-0"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"finalizers": None}}
    )
    assert core.list_namespaced_pod(NS).items == []


def test_orphan_propagation_keeps_dependents(core: Any, custom: Any) -> None:
    job = create_job(custom, "a")
    core.create_namespaced_pod(NS, make_pod("a-0", owner=job))
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", propagation_policy="Orphan"
    )
    assert core.read_namespaced_pod("a-0", NS).metadata.owner_references is None


def test_dependent_of_a_missing_owner_is_collected(core: Any) -> None:
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"},
    }
    core.create_namespaced_pod(NS, make_pod("p", owner=ghost))
    assert core.list_namespaced_pod(NS).items == []


def test_deleting_a_namespace_deletes_its_contents(core: Any) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("team", make_pod("p"))
    core.create_namespaced_config_map("team", {"metadata": {"name": "c", "finalizers": ["hold"]}})
    core.delete_namespace("team")
    assert core.read_namespace("team").status.phase == "Terminating"
    assert core.list_namespaced_pod("team").items == []
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("team", make_pod("q"))
    assert err.value.status == 403
    core.patch_namespaced_config_map("c", "team", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        core.read_namespace("team")
    assert gone.value.status == 404


def test_graceful_pod_deletion_waits_for_the_kubelet() -> None:
    with KubeServer(options=ServerOptions(graceful_pods=True)) as server:
        core = client.CoreV1Api(server.api_client())
        core.create_namespaced_pod(NS, make_pod("p", node="n1"))
        core.delete_namespaced_pod("p", NS)
        pod = core.read_namespaced_pod("p", NS)
        assert pod.metadata.deletion_grace_period_seconds == 30
        core.delete_namespaced_pod("p", NS, grace_period_seconds=0)  # the kubelet's delete
        assert core.list_namespaced_pod(NS).items == []


def test_foreground_deletion_removes_dependents_first(core: Any, custom: Any) -> None:
    job = create_job(custom, "a")
    core.create_namespaced_pod(NS, make_pod("a-0", owner=job))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", propagation_policy="Foreground"
    )
    assert core.list_namespaced_pod(NS).items == []
    pod_gone = first_event(core.list_namespaced_pod, NS, resource_version=rv)
    job_gone = first_event(
        custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=rv
    )
    assert (pod_gone["type"], job_gone["type"]) == ("DELETED", "DELETED")
    assert int(pod_gone["raw_object"]["metadata"]["resourceVersion"]) < int(
        job_gone["raw_object"]["metadata"]["resourceVersion"]
    )
