"""Fixtures for the test API server's own tests (tests/kube/test_apiserver*.py): the
server, clients for the core API and the DLJob CRD, and helpers to create and read
objects and speak raw HTTP to it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from tests.kube.fixtures import KubeServer, kube_server
from tests.kube.samples import GROUP, PLURAL, VERSION, Obj, dljob_crd, make_dljob

__all__ = [
    "NS",
    "Obj",
    "core",
    "create_job",
    "custom",
    "get_job",
    "kube_server",
    "names",
    "raw",
    "status_of",
]

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
