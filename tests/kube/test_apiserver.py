"""The test API server through the official `kubernetes` client (and raw HTTP for wire details)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    dljob_crd,
    make_dljob,
    make_event,
    make_pod,
    owner_ref,
)

Obj = dict[str, Any]
NS = "default"


@pytest.fixture
def core(kube_server: KubeServer) -> Any:
    return client.CoreV1Api(kube_server.api_client())


@pytest.fixture
def custom(kube_server: KubeServer) -> Any:
    client.ApiextensionsV1Api(kube_server.api_client()).create_custom_resource_definition(
        dljob_crd()
    )
    return client.CustomObjectsApi(kube_server.api_client())


def raw(
    server: KubeServer,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.load(e)


def status_of(error: ApiException) -> Obj:
    body: Obj = json.loads(error.body)
    return body


def create_job(custom: Any, name: str, **kwargs: Any) -> Obj:
    job: Obj = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, make_dljob(name, **kwargs)
    )
    return job


def get_job(custom: Any, name: str) -> Obj:
    job: Obj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    return job


def names(items: list[Any]) -> list[str]:
    return [i.metadata.name if hasattr(i, "metadata") else i["metadata"]["name"] for i in items]


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


# --- status subresource and generation ------------------------------------------------


def test_status_subresource_isolation_and_generation(custom: Any) -> None:
    job = create_job(custom, "a") | {"status": {"phase": "Ignored"}}
    assert "status" not in get_job(custom, "a")
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "a", {"status": {"phase": "Running"}, "spec": {"gpus": 9}}
    )
    assert patched["status"] == {"phase": "Running"} and patched["spec"]["gpus"] == 1
    assert patched["metadata"]["generation"] == 1  # status writes do not bump generation
    main = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"status": {"phase": "Hacked"}, "spec": {"gpus": 2}}
    )
    assert main["status"] == {"phase": "Running"} and main["spec"]["gpus"] == 2
    assert main["metadata"]["generation"] == 2
    labelled = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled["metadata"]["generation"] == 2  # metadata changes do not either
    job["metadata"] = labelled["metadata"]
    job["status"] = {"phase": "Done"}
    replaced = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "a", job)
    assert replaced["status"] == {"phase": "Done"} and replaced["spec"]["gpus"] == 2


def test_pod_status_goes_through_the_status_subresource(core: Any) -> None:
    pod = core.create_namespaced_pod(NS, make_pod("p") | {"status": {"phase": "Running"}})
    assert pod.status.phase == "Pending"
    core.patch_namespaced_pod("p", NS, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p", NS).status.phase == "Pending"
    core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p", NS).status.phase == "Running"


# --- patches --------------------------------------------------------------------------


def test_strategic_merge_patch_merges_lists_by_their_merge_key(core: Any) -> None:
    core.create_namespaced_pod(NS, make_pod("p"))
    core.patch_namespaced_pod(
        "p", NS, {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    container = core.read_namespaced_pod("p", NS).spec.containers[0]
    assert container.image == "busybox:2"
    assert [(e.name, e.value) for e in container.env] == [("RANK", "0")]
    assert [p.container_port for p in container.ports] == [29500]
    core.patch_namespaced_pod("p", NS, {"metadata": {"finalizers": ["a"]}})
    core.patch_namespaced_pod("p", NS, {"metadata": {"finalizers": ["b"]}})
    assert core.read_namespaced_pod("p", NS).metadata.finalizers == ["a", "b"]
    core.create_namespaced_service(
        NS, {"metadata": {"name": "s"}, "spec": {"ports": [{"name": "rdzv", "port": 29500}]}}
    )
    core.patch_namespaced_service("s", NS, {"spec": {"ports": [{"name": "http", "port": 80}]}})
    ports = core.read_namespaced_service("s", NS).spec.ports
    assert [(p.name, p.port, p.target_port) for p in ports] == [
        ("rdzv", 29500, 29500),
        ("http", 80, 80),
    ]
    assert core.read_namespaced_pod("p", NS).spec.containers[0].image == "busybox:2"


def test_pod_spec_is_immutable_but_for_images(core: Any) -> None:
    core.create_namespaced_pod(NS, make_pod("p"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "p",
            NS,
            {
                "spec": {
                    "containers": [{"name": "main", "env": [{"name": "WORLD_SIZE", "value": "2"}]}]
                }
            },
        )
    assert err.value.status == 422
    assert "pod updates may not change fields" in status_of(err.value)["message"]


def test_json_patch_ops_and_failed_test_op(core: Any) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map(
        "c",
        NS,
        [
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "3"},
            {"op": "copy", "from": "/data/a", "path": "/data/c"},
            {"op": "move", "from": "/data/b", "path": "/data/d"},
            {"op": "test", "path": "/data/d", "value": "2"},
            {"op": "remove", "path": "/data/c"},
        ],
    )
    assert core.read_namespaced_config_map("c", NS).data == {"a": "3", "d": "2"}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "c", NS, [{"op": "test", "path": "/data/a", "value": "nope"}]
        )
    assert err.value.status == 422


def test_merge_patch_null_deletes_and_strategic_patch_on_crd_is_415(
    kube_server: KubeServer, custom: Any
) -> None:
    create_job(custom, "a", hints={"ckpt": "/ckpt", "every": 10})
    job = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"spec": {"hints": {"every": None}}}
    )
    assert job["spec"]["hints"] == {"ckpt": "/ckpt"}
    code, status = raw(
        kube_server,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}/a",
        {"spec": {"gpus": 2}},
        {"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert code == 415 and status["reason"] == "UnsupportedMediaType"


def test_server_side_apply_creates_then_merges(kube_server: KubeServer, core: Any) -> None:
    path = f"/api/v1/namespaces/{NS}/configmaps/c?fieldManager=test&force=true"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    assert raw(kube_server, "PATCH", path, body, headers)[0] == 201
    body["data"] = {"b": "2"}
    assert raw(kube_server, "PATCH", path, body, headers)[0] == 200
    assert core.read_namespaced_config_map("c", NS).data == {"a": "1", "b": "2"}


# --- schema validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"gpus": 0},
            "spec.gpus",
            "spec.gpus: Invalid value: 0: spec.gpus in body should be greater than or equal to 1",
        ),
        ({"gpus": 65}, "spec.gpus", "should be less than or equal to 64"),
        ({"gpus": "two"}, "spec.gpus", 'spec.gpus in body must be of type integer: "string"'),
        ({"image": None, "gpus": 1}, "spec.image", "spec.image: Required value"),
        (
            {"priority": "urgent"},
            "spec.priority",
            'spec.priority: Unsupported value: "urgent": supported values: "low", "normal", "high"',
        ),
        ({"image": "Bad Image"}, "spec.image", "should match '^[a-z0-9./:-]+$'"),
        ({"env": {"A": 1}}, "spec.env.A", "must be of type string"),
    ],
)
def test_schema_violations_are_422_naming_the_field(
    custom: Any, spec: Obj, field: str, message: str
) -> None:
    body = make_dljob("bad")
    body["spec"].update(spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    status = status_of(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith('DLJob.gpuflow.dev "bad" is invalid: ')
    assert message in status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == [field]


def test_updates_are_validated_too(custom: Any) -> None:
    create_job(custom, "a")
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "a", {"spec": {"gpus": -1}}
        )
    assert err.value.status == 422


def test_unknown_fields_are_pruned_or_rejected_when_strict(
    kube_server: KubeServer, custom: Any
) -> None:
    job = create_job(custom, "a", bogus=True, hints={"free": {"form": 1}})
    assert "bogus" not in job["spec"] and job["spec"]["hints"] == {"free": {"form": 1}}
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}?fieldValidation=Strict"
    code, status = raw(kube_server, "POST", path, make_dljob("b", bogus=True))
    assert code == 400
    assert status["message"] == 'strict decoding error: unknown field "spec.bogus"'


# --- reads: selectors, pagination, tables ---------------------------------------------


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


# --- watch ----------------------------------------------------------------------------


def collect(stream: Any, count: int) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(seen) == count:
            break
    return seen


def first_event(list_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
    stream = watch.Watch().stream(list_fn, *args, timeout_seconds=5, **kwargs)
    try:
        event: Obj = next(stream)
        return event
    finally:
        stream.close()


def in_thread(fn: Callable[[], object], delay_s: float = 0.2) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        fn()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_watch_from_list_rv_sees_added_modified_deleted_in_order(core: Any) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "before"}})
    rv = core.list_namespaced_config_map(NS).metadata.resource_version

    def writes() -> None:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
        core.patch_namespaced_config_map("c", NS, {"data": {"k": "v"}})
        core.delete_namespaced_config_map("c", NS)

    writer = in_thread(writes)
    w = watch.Watch()
    events = collect(
        w.stream(core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=5), 3
    )
    w.stop()
    writer.join()
    assert events == [("ADDED", "c"), ("MODIFIED", "c"), ("DELETED", "c")]


def test_watch_without_rv_starts_with_current_state(core: Any) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    w = watch.Watch()
    assert collect(w.stream(core.list_namespaced_config_map, NS, timeout_seconds=5), 1) == [
        ("ADDED", "a")
    ]
    w.stop()


def test_watch_server_timeout_ends_stream_cleanly(core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=1
        )
    )
    assert events == [] and 0.9 < time.monotonic() - started < 3


def test_watch_from_compacted_rv_gets_410_and_relist_recovers(
    kube_server: KubeServer, core: Any
) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    old_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    core.create_namespaced_config_map(NS, {"metadata": {"name": "b"}})
    kube_server.compact()
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, NS, resource_version=old_rv, timeout_seconds=2
            )
        )
    assert err.value.status == 410
    # Raw stream: 200, then one ERROR event carrying a 410 Expired Status, as a real server.
    response = core.list_namespaced_config_map(
        NS, watch=True, resource_version=old_rv, _preload_content=False
    )
    (line,) = [x for x in response.read().decode().splitlines() if x]
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    relisted = core.list_namespaced_config_map(NS)
    assert names(relisted.items) == ["a", "b"]
    writer = in_thread(lambda: core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}}))
    w = watch.Watch()
    assert collect(
        w.stream(
            core.list_namespaced_config_map,
            NS,
            resource_version=relisted.metadata.resource_version,
            timeout_seconds=5,
        ),
        1,
    ) == [("ADDED", "c")]
    w.stop()
    writer.join()


def test_history_window_is_bounded() -> None:
    with KubeServer(options=ServerOptions(history_limit=5)) as small:
        small_core = client.CoreV1Api(small.api_client())
        rv = small_core.list_namespaced_config_map(NS).metadata.resource_version
        for i in range(12):
            small_core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as err:
            list(
                watch.Watch().stream(
                    small_core.list_namespaced_config_map,
                    NS,
                    resource_version=rv,
                    timeout_seconds=1,
                )
            )
        assert err.value.status == 410


def test_watch_with_label_selector_sees_objects_enter_and_leave(core: Any) -> None:
    core.create_namespaced_pod(NS, make_pod("p", {"app": "x"}))
    rv = core.list_namespaced_pod(NS).metadata.resource_version

    def writes() -> None:
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "y"}}})
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "x"}}})
        core.patch_namespaced_pod("p", NS, {"metadata": {"annotations": {"k": "v"}}})

    writer = in_thread(writes)
    w = watch.Watch()
    events = collect(
        w.stream(
            core.list_namespaced_pod,
            NS,
            label_selector="app=x",
            resource_version=rv,
            timeout_seconds=5,
        ),
        3,
    )
    w.stop()
    writer.join()
    assert events == [("DELETED", "p"), ("ADDED", "p"), ("MODIFIED", "p")]


def test_watch_bookmarks_carry_the_current_rv(core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        NS,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == rv
        break
    w.stop()


def test_close_watches_ends_open_streams(kube_server: KubeServer, core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    closer = in_thread(kube_server.close_watches, delay_s=0.3)
    started = time.monotonic()
    assert (
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=30
            )
        )
        == []
    )
    closer.join()
    assert time.monotonic() - started < 5


def test_close_watches_abruptly_cuts_the_connection(kube_server: KubeServer, core: Any) -> None:
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    closer = in_thread(lambda: kube_server.close_watches(abrupt=True), delay_s=0.3)
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=30
    )
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(stream)
    closer.join()


def test_watch_of_custom_resources(custom: Any) -> None:
    rv = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["metadata"][
        "resourceVersion"
    ]
    writer = in_thread(lambda: create_job(custom, "a"))
    w = watch.Watch()
    assert collect(
        w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NS,
            PLURAL,
            resource_version=rv,
            timeout_seconds=5,
        ),
        1,
    ) == [("ADDED", "a")]
    w.stop()
    writer.join()


# --- deletion: finalizers, garbage collection, namespaces -----------------------------


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


def test_send_initial_events_ends_with_a_marked_bookmark(
    kube_server: KubeServer, core: Any
) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    path = (
        f"{kube_server.url}/api/v1/namespaces/{NS}/configmaps?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    with urllib.request.urlopen(path, timeout=5) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_warn_field_validation_prunes_with_a_warning_header(
    kube_server: KubeServer, custom: Any
) -> None:
    request = urllib.request.Request(
        f"{kube_server.url}/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}",
        data=json.dumps(make_dljob("a", bogus=1)).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
        assert "bogus" not in json.load(response)["spec"]
