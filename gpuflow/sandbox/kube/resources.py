"""The resource types the test server serves: built-ins plus those CRDs register.

`Registry` is consulted by `routing.py` to route a URL to a `ResourceType`, by
`discovery.py` to describe the API, and by `store.py`, which keeps it in step with
the CustomResourceDefinition objects it stores.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# Field selectors every resource accepts (apiserver's DefaultClusterScopedAttr/NamespaceScoped).
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    # Field selectors beyond metadata.name/namespace, as registered by each built-in's strategy.
    field_labels: frozenset[str] = frozenset()
    # CRD-only: the version's openAPIV3Schema and additionalPrinterColumns.
    schema: Obj | None = None
    printer_columns: tuple[Obj, ...] = ()
    custom: bool = False
    # CRD-only: a deprecated version's warning, sent on every request to it.
    deprecation_warning: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage identity: the same objects are served under every version of a CRD."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def selectable_fields(self) -> frozenset[str]:
        return COMMON_FIELDS | self.field_labels


_POD_FIELDS = frozenset(
    {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)

BUILTINS: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        "namespace",
        ("ns",),
        status_subresource=True,
        field_labels=frozenset({"status.phase"}),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        "pod",
        ("po",),
        ("all",),
        status_subresource=True,
        field_labels=_POD_FIELDS,
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        "node",
        ("no",),
        status_subresource=True,
        field_labels=frozenset({"spec.unschedulable"}),
    ),
    ResourceType(
        "",
        "v1",
        "services",
        "Service",
        True,
        "service",
        ("svc",),
        ("all",),
        status_subresource=True,
    ),
    ResourceType("", "v1", "events", "Event", True, "event", ("ev",), field_labels=_EVENT_FIELDS),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, "secret"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, "lease"),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        "customresourcedefinition",
        ("crd", "crds"),
        ("api-extensions",),
        status_subresource=True,
    ),
)

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_KEY = ("", "namespaces")

_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting versions in Kubernetes order: v2 > v1 > v1beta2 > v1beta1 > v1alpha1."""
    m = _VERSION_RE.match(version)
    if not m:
        return (3, 0, 0, version)
    stability = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (stability, -int(m.group(1)), -int(m.group(3) or 0), version)


def types_from_crd(crd: Obj) -> list[ResourceType]:
    """The ResourceTypes a CustomResourceDefinition serves, one per served version."""
    spec = crd["spec"]
    names = spec["names"]
    subresources_of = spec.get("subresources") or {}
    types = []
    for v in spec.get("versions", []):
        if not v.get("served", True):
            continue
        subresources = v.get("subresources") or subresources_of
        schema = (v.get("schema") or spec.get("validation") or {}).get("openAPIV3Schema")
        types.append(
            ResourceType(
                group=spec["group"],
                version=v["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in subresources,
                schema=schema,
                printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
                custom=True,
                deprecation_warning=_deprecation(spec["group"], names["kind"], v),
            )
        )
    return types


def _deprecation(group: str, kind: str, version: Obj) -> str | None:
    """A deprecated CRD version's Warning, the real server's default words without
    its own `deprecationWarning`; None for a version not deprecated."""
    if not version.get("deprecated"):
        return None
    default = f"{group}/{version['name']} {kind} is deprecated"
    return str(version.get("deprecationWarning") or default)


@dataclass
class Registry:
    """Thread-safe map of served resource types (built-ins fixed, CRDs added/removed)."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)
    _crd_types: dict[str, list[ResourceType]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def versions_of(self, key: tuple[str, str]) -> list[ResourceType]:
        with self._lock:
            return [rt for rt in self._types.values() if rt.key == key]

    def all(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first; the core group is ""."""
        out: dict[str, set[str]] = {}
        for rt in self.all():
            out.setdefault(rt.group, set()).add(rt.version)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def set_crd(self, name: str, types: list[ResourceType]) -> None:
        with self._lock:
            for old in self._crd_types.pop(name, []):
                self._types.pop((old.group, old.version, old.plural), None)
            self._crd_types[name] = types
            for rt in types:
                self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_crd(self, name: str) -> None:
        self.set_crd(name, [])
        with self._lock:
            self._crd_types.pop(name, None)
