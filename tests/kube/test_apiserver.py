"""The test API server through the official `kubernetes` client (and raw HTTP for wire details):
discovery, metadata and errors, optimistic concurrency, fault hooks and dry run.

The other topics: test_apiserver_writes.py (status, patches, schemas),
test_apiserver_reads.py (selectors, pages, tables), test_apiserver_watch.py and
test_apiserver_deletion.py; the fixtures and client helpers are in conftest.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer
from tests.kube.conftest import (
    NS,
    create_job,
    get_job,
    names,
    raw,
    status_of,
)
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    dljob_crd,
    make_dljob,
    make_pod,
)

# --- discovery ------------------------------------------------------------------------


def test_discovery_lists_builtins_and_served_crds(kube_server: KubeServer, custom: Any) -> None:
    api = kube_server.api_client()
    core_resources = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core_resources["pods"].short_names == ["po"]
    assert core_resources["pods/status"].verbs == ["get", "patch", "update"]
    assert not core_resources["nodes"].namespaced
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"coordination.k8s.io", "apiextensions.k8s.io", GROUP} <= groups
    code, rl = raw(kube_server, "GET", f"/apis/{GROUP}/{VERSION}")
    assert code == 200
    by_name = {r["name"]: r for r in rl["resources"]}
    assert by_name["dljobs"]["shortNames"] == ["dlj"]
    assert by_name["dljobs"]["kind"] == "DLJob" and by_name["dljobs"]["namespaced"]
    assert "dljobs/status" in by_name
    assert client.VersionApi(api).get_code().minor == "32"


def test_cluster_scoped_crd_is_served_without_namespace(kube_server: KubeServer) -> None:
    client.ApiextensionsV1Api(kube_server.api_client()).create_custom_resource_definition(
        dljob_crd(scope="Cluster", plural="gpupools", kind="GPUPool", short_name="gp")
    )
    custom = client.CustomObjectsApi(kube_server.api_client())
    body = make_dljob("pool-a") | {"kind": "GPUPool"}
    created = custom.create_cluster_custom_object(GROUP, VERSION, "gpupools", body)
    assert "namespace" not in created["metadata"]
    listed = custom.list_cluster_custom_object(GROUP, VERSION, "gpupools")
    assert names(listed["items"]) == ["pool-a"]


def test_deleting_a_crd_stops_serving_it_and_drops_its_objects(
    kube_server: KubeServer, custom: Any
) -> None:
    create_job(custom, "a")
    client.ApiextensionsV1Api(kube_server.api_client()).delete_custom_resource_definition(
        f"{PLURAL}.{GROUP}"
    )
    with pytest.raises(ApiException) as err:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    assert err.value.status == 404


# --- metadata and errors --------------------------------------------------------------


def test_create_fills_server_metadata_and_defaults(custom: Any) -> None:
    job = create_job(custom, "a", gpus=2)
    meta = job["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    assert job["spec"]["queue"] == "default" and job["spec"]["priority"] == "normal"
    generated = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_dljob("") | {"metadata": {"generateName": "train-"}}
    )
    assert generated["metadata"]["name"].startswith("train-")
    assert len(generated["metadata"]["name"]) == len("train-") + 5


def test_resource_versions_come_from_one_global_counter(core: Any, custom: Any) -> None:
    first = int(create_job(custom, "a")["metadata"]["resourceVersion"])
    pod = core.create_namespaced_pod(NS, make_pod("p"))
    second = int(create_job(custom, "b")["metadata"]["resourceVersion"])
    assert first < int(pod.metadata.resource_version) < second


def test_already_exists_is_a_409_status(custom: Any) -> None:
    create_job(custom, "a")
    with pytest.raises(ApiException) as err:
        create_job(custom, "a")
    status = status_of(err.value)
    assert err.value.status == 409
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'dljobs.gpuflow.dev "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "group": GROUP, "kind": "dljobs"},
        "code": 409,
    }


def test_objects_in_a_missing_namespace_are_not_found(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("nowhere", make_pod("p"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "nowhere" not found'


def test_get_missing_object_is_not_found(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("ghost", NS)
    assert status_of(err.value)["reason"] == "NotFound"
    assert status_of(err.value)["details"] == {"name": "ghost", "kind": "pods"}


def test_unknown_paths_are_404_statuses(kube_server: KubeServer) -> None:
    code, body = raw(kube_server, "GET", "/apis/nope.dev/v1/things")
    assert code == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"


def test_pod_without_containers_is_invalid(core: Any) -> None:
    pod = make_pod("p")
    pod["spec"]["containers"] = []
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod)
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec.containers"


def test_invalid_names_are_rejected(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "Bad_Name"}})
    assert err.value.status == 422
    assert "metadata.name: Invalid value" in status_of(err.value)["message"]


# --- optimistic concurrency -----------------------------------------------------------


def test_replace_with_stale_resource_version_conflicts(custom: Any) -> None:
    stale = create_job(custom, "a")
    fresh = get_job(custom, "a")
    fresh["spec"]["gpus"] = 2
    custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", fresh)
    stale["spec"]["gpus"] = 3
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", stale)
    status = status_of(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on dljobs.gpuflow.dev "a": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert get_job(custom, "a")["spec"]["gpus"] == 2


def test_lease_conflict_is_what_leader_election_relies_on(kube_server: KubeServer) -> None:
    leases = client.CoordinationV1Api(kube_server.api_client())
    lease = {
        "metadata": {"name": "gpuflow-operator"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    created = leases.create_namespaced_lease(NS, lease)
    created.spec.holder_identity = "b"
    leases.replace_namespaced_lease("gpuflow-operator", NS, created)
    created.spec.holder_identity = "c"  # still the old resourceVersion
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease("gpuflow-operator", NS, created)
    assert err.value.status == 409
    assert leases.read_namespaced_lease("gpuflow-operator", NS).spec.holder_identity == "b"


def test_patch_carrying_a_stale_resource_version_conflicts(custom: Any) -> None:
    job = create_job(custom, "a")
    rv = job["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"resourceVersion": rv}, "spec": {"gpus": 2}}
    )
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "a",
            {"metadata": {"resourceVersion": rv}, "spec": {"gpus": 3}},
        )
    assert err.value.status == 409


def test_unchanged_update_keeps_the_resource_version(custom: Any) -> None:
    job = create_job(custom, "a")
    again = custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", job)
    assert again["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]


# --- fault hooks and dry run ----------------------------------------------------------


def test_fail_next_injects_one_error(kube_server: KubeServer, core: Any) -> None:
    kube_server.fail_next("create", "pods", 503)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, make_pod("p"))
    assert err.value.status == 503
    assert status_of(err.value)["reason"] == "ServiceUnavailable"
    core.create_namespaced_pod(NS, make_pod("p"))
    kube_server.fail_next("patch", "pods/status", 409)
    with pytest.raises(ApiException) as conflict:
        core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    assert conflict.value.status == 409


def test_dry_run_changes_nothing(core: Any) -> None:
    created = core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}}, dry_run="All")
    assert created.metadata.name == "c"
    assert core.list_namespaced_config_map(NS).items == []


def test_kubeconfig_loads_with_the_official_loader(kube_server: KubeServer) -> None:
    api_client = config.new_client_from_config(config_file=str(kube_server.kubeconfig))
    with api_client:
        namespaces = client.CoreV1Api(api_client).list_namespace().items
    assert "default" in names(namespaces)
