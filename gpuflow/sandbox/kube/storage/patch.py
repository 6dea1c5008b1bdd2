"""The PATCH bodies the API server accepts, applied to plain JSON objects.

Called by `store.py` (`patched`, by content type). Three formats:

* JSON merge patch, RFC 7386 (`application/merge-patch+json`): exact.
* JSON patch, RFC 6902 (`application/json-patch+json`): exact (add, remove, replace,
  move, copy, test; `-` appends; `~0`/`~1` escapes).
* Strategic merge patch (`application/strategic-merge-patch+json`, built-ins only): an
  approximation. The real server reads `patchStrategy`/`patchMergeKey` from the Go
  types; here a table of field names stands in for them (containers/env/volumes by
  `name`, volumeMounts by `mountPath`, ports by `containerPort` or, for Services,
  `port`, conditions/addresses by `type`, ownerReferences by `uid`; finalizers merge
  as a set). Every other list is replaced whole. Directives handled: `$patch:
  replace|delete|merge`, `$retainKeys`, `$deleteFromPrimitiveList/<f>`,
  `$setElementOrder/<f>` (accepted, ordering ignored).
"""

from __future__ import annotations

import copy
from typing import Any

from gpuflow.sandbox.kube.errors import ApiError, bad_request, unsupported_media_type

JSON = Any
# The PATCH content types served; server-side apply is store.Store.patch's own.
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)

# Field name -> merge key(s), standing in for patchMergeKey struct tags of core/v1.
MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "ports": ("containerPort", "port"),
    "conditions": ("type",),
    "addresses": ("type",),
    "ownerReferences": ("uid",),
    "hostAliases": ("ip",),
    "resourceClaims": ("name",),
    "topologySpreadConstraints": ("topologyKey",),
}
# Lists of scalars with patchStrategy=merge: merged as ordered sets.
MERGE_SETS = frozenset({"finalizers"})


def invalid_patch(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def patched(old: JSON, content_type: str, patch: JSON, *, custom: bool) -> dict[str, Any]:
    """`old` with a PATCH body of `content_type` applied; 415 for a type not served
    (strategic merge patch on a custom resource, as on a real server)."""
    if content_type == "application/merge-patch+json":
        return dict(merge_patch(old, patch))
    if content_type == "application/json-patch+json":
        result = json_patch(old, patch)
        if not isinstance(result, dict):
            raise bad_request("json patch result is not an object")
        return result
    if content_type == "application/strategic-merge-patch+json":
        if custom:
            raise unsupported_media_type(", ".join(t for t in PATCH_TYPES if "strategic" not in t))
        return dict(strategic_merge_patch(old, patch))
    raise unsupported_media_type(", ".join(PATCH_TYPES))


# --- RFC 7386 -------------------------------------------------------------------------


def merge_patch(target: JSON, patch: JSON) -> JSON:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 -------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise invalid_patch(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit():
        raise invalid_patch(f"invalid array index {token!r}")
    i = int(token)
    limit = len(container) if for_add else len(container) - 1
    if i > limit:
        raise invalid_patch(f"array index {i} out of bounds")
    return i


def _parent(doc: JSON, tokens: list[str], op: str) -> JSON:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise invalid_patch(
                f"jsonpatch {op} operation does not apply: doc is missing path: /{'/'.join(tokens)}"
            )
    return node


def _get(doc: JSON, tokens: list[str], op: str) -> JSON:
    if not tokens:
        return doc
    parent = _parent(doc, tokens, op)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise invalid_patch(
        f"jsonpatch {op} operation does not apply: doc is missing key: /{'/'.join(tokens)}"
    )


def _remove(doc: JSON, tokens: list[str], op: str) -> JSON:
    parent = _parent(doc, tokens, op)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, for_add=False))
    raise invalid_patch(
        f"jsonpatch {op} operation does not apply: doc is missing key: /{'/'.join(tokens)}"
    )


def _add(doc: JSON, tokens: list[str], value: JSON, op: str) -> JSON:
    if not tokens:
        return value
    parent = _parent(doc, tokens, op)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise invalid_patch(f"jsonpatch {op} operation does not apply: doc is missing path")
    return doc


def json_patch(target: JSON, ops: JSON) -> JSON:
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise invalid_patch(f"invalid JSON patch operation: {op!r}")
        name, tokens = op["op"], _pointer(op["path"])
        if name == "add":
            doc = _add(doc, tokens, copy.deepcopy(op.get("value")), name)
        elif name == "remove":
            if not tokens:
                raise invalid_patch("jsonpatch remove operation does not apply to the root")
            _remove(doc, tokens, name)
        elif name == "replace":
            _get(doc, tokens, name)  # must exist
            if not tokens:
                doc = copy.deepcopy(op.get("value"))
            else:
                _remove(doc, tokens, name)
                doc = _add(doc, tokens, copy.deepcopy(op.get("value")), name)
        elif name in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = (
                _remove(doc, source, name)
                if name == "move"
                else copy.deepcopy(_get(doc, source, name))
            )
            doc = _add(doc, tokens, value, name)
        elif name == "test":
            if _get(doc, tokens, name) != op.get("value"):
                raise invalid_patch(f"testing value {op['path']} failed")
        else:
            raise invalid_patch(f"Unexpected kind: {name}")
    return doc


# --- strategic merge patch ------------------------------------------------------------


def strategic_merge_patch(target: JSON, patch: JSON) -> JSON:
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", "strategic merge patch must be a JSON object")
    return _smp_map(copy.deepcopy(target) if isinstance(target, dict) else {}, patch)


def _smp_map(result: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
                continue
            current = result.get(key)
            result[key] = _smp_map(current if isinstance(current, dict) else {}, value)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _smp_list(key, result[key], value)
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_key(field: str, items: list[Any]) -> str | None:
    for key in MERGE_KEYS.get(field, ()):
        if any(isinstance(i, dict) and key in i for i in items):
            return key
    return None


def _smp_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [
            _strip_directives(copy.deepcopy(i))
            for i in patch
            if not (isinstance(i, dict) and i.get("$patch") == "replace")
        ]
    if field in MERGE_SETS:
        merged = list(current)
        merged += [x for x in patch if x not in merged]
        return merged
    key = _merge_key(field, current + patch)
    if key is None:
        return [_strip_directives(copy.deepcopy(i)) for i in patch]
    merged = list(current)
    for item in patch:
        if not isinstance(item, dict):
            continue
        at = next(
            (
                n
                for n, c in enumerate(merged)
                if isinstance(c, dict) and c.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                merged.pop(at)
        elif at is None:
            merged.append(_strip_directives(copy.deepcopy(item)))
        else:
            merged[at] = _smp_map(merged[at], item)
    return merged


def _strip_directives(value: JSON) -> JSON:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
