"""The test API server's writes: the status subresource, patches and server-side
apply, and schema validation (pruning, strict and warning field validation)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from gpuflow.sandbox.kube.apiserver import KubeServer
from tests.kube.conftest import (
    NS,
    Obj,
    create_job,
    get_job,
    raw,
    status_of,
)
from tests.kube.samples import (
    GROUP,
    PLURAL,
    VERSION,
    make_dljob,
    make_pod,
)

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
