"""Discovery and OpenAPI documents, built from the `Registry` on each request.

Called by `handler.py` for /version, /api, /apis and /openapi/v3. Only legacy
(unaggregated) discovery is served: a client asking for `as=APIGroupDiscoveryList` gets
a plain APIGroupList with `Content-Type: application/json`, which client-go (kubectl
1.32) takes as the sign to fall back to per-group-version discovery. The OpenAPI v3
documents carry just what kubectl reads: one PATCH operation per kind with its
`x-kubernetes-group-version-kind` and a `fieldValidation` parameter, so kubectl sends
`fieldValidation=Strict` and leaves validation to this server, plus the CRD schemas
under `components.schemas`. There is no /openapi/v2 (404): kubectl then falls back to
its compiled-in types for strategic merge patches of built-ins.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpuflow.sandbox.kube.resources import ALL_VERBS, Registry, ResourceType

Obj = dict[str, Any]

VERSION_INFO: Obj = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-gpuflow-test",
    "gitCommit": "",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group_entry(group: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> Obj:
    groups = [_group_entry(g, vs) for g, vs in sorted(registry.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> Obj | None:
    versions = registry.groups().get(group)
    if not versions or not group:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def _resource_entries(rt: ResourceType) -> list[Obj]:
    main: Obj = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(ALL_VERBS),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    entries = [main]
    if rt.status_subresource:
        entries.append(
            {
                "name": f"{rt.plural}/status",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    return entries


def api_resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    types = sorted(
        (rt for rt in registry.all() if rt.group == group and rt.version == version),
        key=lambda rt: rt.plural,
    )
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [e for rt in types for e in _resource_entries(rt)],
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _openapi_doc(registry: Registry, group: str, version: str) -> Obj:
    paths: Obj = {}
    schemas: Obj = {}
    for rt in registry.all():
        if (rt.group, rt.version) != (group, version):
            continue
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        scope = "namespaces/{namespace}/" if rt.namespaced else ""
        path = f"/{_gv_path(group, version)}/{scope}{rt.plural}/{{name}}"
        params = [
            {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for n in ("dryRun", "fieldManager", "fieldValidation", "force")
        ]
        paths[path] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            }
        }
        if rt.schema:
            reversed_group = ".".join(reversed(group.split(".")))
            schemas[f"{reversed_group}.{version}.{rt.kind}"] = {
                **rt.schema,
                "x-kubernetes-group-version-kind": [gvk],
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _digest(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()


def openapi_v3_index(registry: Registry) -> Obj:
    paths = {}
    for group, versions in registry.groups().items():
        for version in versions:
            gv = _gv_path(group, version)
            digest = _digest(_openapi_doc(registry, group, version))
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def openapi_v3_doc(registry: Registry, gv_path: str) -> Obj | None:
    parts = gv_path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    if version not in registry.groups().get(group, []):
        return None
    return _openapi_doc(registry, group, version)
