"""What a request asks for: the resource its URL names, the verb, and its options.

Called by apiserver.py's handler for every request that is not discovery or a health
check: `parse_route` maps a URL to a resource type, namespace, name and subresource
(None: a 404), `verb_of` maps the HTTP method to the Kubernetes verb (a 405 where
none applies), and the query and body give the selectors (`matcher_of`), the
delete options and the decoded body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from gpuflow.sandbox.kube.errors import ApiError, bad_request, method_not_allowed
from gpuflow.sandbox.kube.resources import Registry, ResourceType
from gpuflow.sandbox.kube.selectors import Matcher, matcher
from gpuflow.sandbox.kube.storage.deletion import DeleteOptions

NOT_FOUND = ApiError(
    404,
    "NotFound",
    "the server could not find the requested resource",
    {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]},
)


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str
    name: str
    subresource: str

    @property
    def resource(self) -> str:
        return f"{self.rt.plural}/{self.subresource}" if self.subresource else self.rt.plural


def parse_route(registry: Registry, path: str) -> Route | None:
    """The resource a URL names; None if it names none (the caller answers 404)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = registry.lookup(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = registry.lookup(group, version, rest[0])
    if rt is None or len(rest) > 3 or (namespace and not rt.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not (sub == "status" and rt.status_subresource):
        return None
    return Route(rt, namespace, name, sub)


def flag(query: dict[str, str], name: str) -> bool:
    """A boolean query parameter (`watch=1`, `allowWatchBookmarks=true`)."""
    return query.get(name, "").lower() in ("1", "true")


def verb_of(method: str, route: Route, query: dict[str, str]) -> str:
    """The Kubernetes verb of a request (fault injection and dispatch go by it)."""
    if method == "GET":
        if route.name:
            return "get"
        return "watch" if flag(query, "watch") else "list"
    if route.name:
        verbs = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    else:
        verbs = {"POST": "create", "DELETE": "deletecollection"}
        if method == "POST" and route.rt.namespaced and not route.namespace:
            raise method_not_allowed()
    if method not in verbs:
        raise method_not_allowed()
    return verbs[method]


def matcher_of(rt: ResourceType, query: dict[str, str]) -> Matcher:
    """The label and field selectors of a list, watch or deletecollection."""
    return matcher(
        query.get("labelSelector", ""), query.get("fieldSelector", ""), rt.selectable_fields()
    )


def delete_options(query: dict[str, str], raw: bytes) -> DeleteOptions:
    """A DELETE's options, from its query and its (optional) DeleteOptions body."""
    body = decode_body(raw) if raw.strip() else {}
    grace = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
    pre = body.get("preconditions") or {}
    return DeleteOptions(
        propagation=query.get("propagationPolicy") or body.get("propagationPolicy") or "Background",
        grace_period_s=None if grace is None else int(grace),
        uid=pre.get("uid"),
        resource_version=pre.get("resourceVersion"),
        dry_run=bool(query.get("dryRun") or body.get("dryRun")),
    )


def decode_body(raw: bytes, yaml_ok: bool = False) -> Any:
    """A request body as JSON (or YAML, for apply patches); 400 if it does not parse."""
    try:
        if yaml_ok:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise bad_request(f"error decoding request body: {e}") from e
