"""Per-kind create/update rules, after the real registry strategies (pkg/registry/*/strategy.go).

Called by `store.py` before it commits a write: fill server-owned metadata, keep status
out of main-resource writes (and everything but status out of status writes), bump
`metadata.generation` on spec changes, run the CRD schema (`schema.py`), and check the
few built-in invariants a client is likely to trip over (pod containers, immutable pod
spec, CRD names). Built-in objects are otherwise stored as sent: no defaulting of pod
specs beyond the few fields noted in `_create_defaults`.
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

from gpuflow.sandbox.kube.errors import FieldError, bad_request, invalid
from gpuflow.sandbox.kube.resources import ResourceType
from gpuflow.sandbox.kube.schema import apply_defaults, prune, validate

Obj = dict[str, Any]

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    f"used for validation is '{_SUBDOMAIN}')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_LABEL}')"
)
# Metadata the server owns: kept from the stored object on every update.
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)
# Cluster IPs handed to Services (10.96.0.0/12 is kubeadm's default service CIDR).
_cluster_ips = (f"10.96.{n // 250}.{n % 250 + 1}" for n in itertools.count(1))


def check_kind(rt: ResourceType, obj: Obj) -> None:
    """apiVersion/kind may be omitted (they are filled in) but must not name another type."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise bad_request("Object 'metadata' is missing or not an object")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if api_version and api_version != rt.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the "
            f"expected API version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )
    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
    obj.setdefault("metadata", {})


def check_name(rt: ResourceType, obj: Obj) -> None:
    name = obj["metadata"].get("name", "")
    regex, msg, limit = (
        (_LABEL, _LABEL_MSG, 63)
        if rt.key == ("", "namespaces")
        else (_SUBDOMAIN, _SUBDOMAIN_MSG, 253)
    )
    if not name:
        raise invalid(
            rt.kind,
            rt.group,
            name,
            [FieldError("Required", "metadata.name", "name or generateName is required")],
        )
    if len(name) > limit or not re.fullmatch(regex, name):
        raise invalid(rt.kind, rt.group, name, [FieldError("Invalid", "metadata.name", msg, name)])


def prepare_create(rt: ResourceType, obj: Obj, field_validation: str) -> list[str]:
    """Server-side changes to a new object; returns warnings for unknown fields."""
    if rt.status_subresource and rt.key not in (("", "nodes"),):
        obj.pop("status", None)
    _create_defaults(rt, obj)
    _service_port_defaults(rt, obj)
    warnings = _custom_schema(rt, obj, field_validation)
    _validate_builtin(rt, obj, None)
    return warnings


def prepare_update(
    rt: ResourceType, new: Obj, old: Obj, subresource: str, field_validation: str
) -> list[str]:
    """Make `new` what the server would store when replacing `old` with it."""
    meta, old_meta = new["metadata"], old["metadata"]
    for key in _SERVER_META:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if subresource == "status":
        status = new.get("status")
        new.clear()
        new.update(copy.deepcopy(old))
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status
    elif rt.status_subresource:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    _service_port_defaults(rt, new)
    warnings = _custom_schema(rt, new, field_validation)
    _check_finalizers(rt, new, old)
    _validate_builtin(rt, new, old)
    if _spec_of(rt, new) != _spec_of(rt, old):
        meta["generation"] = old_meta.get("generation", 1) + 1
    return warnings


def _spec_of(rt: ResourceType, obj: Obj) -> Obj:
    """What generation tracks: everything but metadata (and status, with a subresource)."""
    skip = {"metadata", "status"} if rt.status_subresource else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def _check_finalizers(rt: ResourceType, new: Obj, old: Obj) -> None:
    if not old["metadata"].get("deletionTimestamp"):
        return
    added = set(new["metadata"].get("finalizers") or []) - set(
        old["metadata"].get("finalizers") or []
    )
    if added:
        raise invalid(
            rt.kind,
            rt.group,
            new["metadata"]["name"],
            [
                FieldError(
                    "Forbidden",
                    "metadata.finalizers",
                    f"no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers []string{{{', '.join(repr(f) for f in sorted(added))}}}",
                )
            ],
        )


def _custom_schema(rt: ResourceType, obj: Obj, field_validation: str) -> list[str]:
    if not rt.custom or not rt.schema:
        return []
    unknown = prune(rt.schema, obj)
    if unknown and field_validation == "Strict":
        raise bad_request(
            "strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown)
        )
    apply_defaults(rt.schema, obj)
    errors = validate(rt.schema, obj)
    if errors:
        raise invalid(rt.kind, rt.group, obj["metadata"].get("name", ""), errors)
    return [f'unknown field "{u}"' for u in unknown] if field_validation == "Warn" else []


def _create_defaults(rt: ResourceType, obj: Obj) -> None:
    spec = obj.setdefault("spec", {}) if rt.key in (("", "pods"), ("", "services")) else None
    if rt.key == ("", "pods"):
        assert spec is not None
        obj["status"] = {"phase": "Pending"}
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("schedulerName", "default-scheduler")
    elif rt.key == ("", "services"):
        assert spec is not None
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("clusterIP", next(_cluster_ips))
        obj["status"] = {"loadBalancer": {}}
    elif rt.key == ("", "namespaces"):
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        _crd_defaults(obj)


def _service_port_defaults(rt: ResourceType, obj: Obj) -> None:
    """Defaulted on every write, as the Go defaulting functions run on each decode."""
    if rt.key != ("", "services"):
        return
    for port in (obj.get("spec") or {}).get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


def _crd_defaults(crd: Obj) -> None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    if "kind" in names:
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("scope", "Namespaced")
    spec.setdefault("conversion", {"strategy": "None"})
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": copy.deepcopy(names),
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": r,
                "message": m,
                "lastTransitionTime": crd["metadata"].get("creationTimestamp"),
            }
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
        "storedVersions": storage,
    }


def _validate_builtin(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    name = obj["metadata"].get("name", "")
    errors: list[FieldError] = []
    if rt.key == ("", "pods"):
        errors = _pod_errors(obj, old)
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        errors = _crd_errors(obj)
    if errors:
        raise invalid(rt.kind, rt.group, name, errors)


def _pod_errors(pod: Obj, old: Obj | None) -> list[FieldError]:
    containers = (pod.get("spec") or {}).get("containers")
    if not containers:
        return [FieldError("Required", "spec.containers")]
    errors = []
    for i, c in enumerate(containers):
        for key in ("name", "image"):
            if not c.get(key):
                errors.append(FieldError("Required", f"spec.containers[{i}].{key}"))
    if old is not None and not errors:

        def mutable_stripped(spec: Obj) -> Obj:
            spec = copy.deepcopy(spec)
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                c.pop("image", None)
            for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
                spec.pop(key, None)
            return spec

        if mutable_stripped(pod.get("spec", {})) != mutable_stripped(old.get("spec", {})):
            errors.append(
                FieldError(
                    "Forbidden",
                    "spec",
                    "pod updates may not change fields "
                    "other than `spec.containers[*].image`, "
                    "`spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                    "additions to existing tolerations) or "
                    "`spec.terminationGracePeriodSeconds`",
                )
            )
    return errors


def _crd_errors(crd: Obj) -> list[FieldError]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errors = []
    for key in ("plural", "kind"):
        if not names.get(key):
            errors.append(FieldError("Required", f"spec.names.{key}"))
    if not spec.get("group"):
        errors.append(FieldError("Required", "spec.group"))
    versions = spec.get("versions") or []
    if not versions:
        errors.append(FieldError("Required", "spec.versions"))
    if sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            FieldError(
                "Invalid",
                "spec.versions",
                "must have exactly one version marked as storage version",
                versions,
            )
        )
    for i, v in enumerate(versions):
        if not (v.get("schema") or {}).get("openAPIV3Schema"):
            errors.append(
                FieldError(
                    "Required", f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required"
                )
            )
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if not errors and crd["metadata"]["name"] != expected:
        errors.append(
            FieldError(
                "Invalid",
                "metadata.name",
                'must be spec.names.plural+"."+spec.group',
                crd["metadata"]["name"],
            )
        )
    return errors
