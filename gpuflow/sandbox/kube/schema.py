"""Structural-schema handling for custom resources: pruning, defaulting, validation.

Called by `store.py` on every create/update/patch of a custom resource, in the order
the real apiextensions-apiserver uses: prune unknown fields (reporting them for
`fieldValidation=Strict|Warn`), apply `default:` values, then validate. Supported
OpenAPI v3 keywords: type (object/array/string/integer/number/boolean), nullable,
properties, required, additionalProperties (schema, true, false), items, enum,
minimum/maximum (+ exclusive), minLength/maxLength, pattern, minItems/maxItems,
minProperties/maxProperties, allOf/anyOf/oneOf/not, x-kubernetes-preserve-unknown-fields,
x-kubernetes-int-or-string. Not supported: format checks, CEL x-kubernetes-validations,
x-kubernetes-list-type uniqueness.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from gpuflow.sandbox.kube.errors import FieldError

Schema = dict[str, Any]

# Never pruned at the root: the API machinery owns them.
_ROOT_KEPT = frozenset({"apiVersion", "kind", "metadata"})


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(schema: Schema, obj: dict[str, Any]) -> list[str]:
    """Remove fields the schema does not declare; returns their paths (`spec.foo`)."""
    unknown: list[str] = []
    for key in list(obj):
        if key in _ROOT_KEPT:
            continue
        _prune_field(schema, obj, key, "", unknown)
    return unknown


def _child_schema(schema: Schema, key: str) -> Schema | bool | None:
    """The schema for `key` of an object: a dict, True (keep as is) or None (unknown)."""
    props = schema.get("properties") or {}
    if key in props:
        return dict(props[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    if extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
        return True
    return None


def _prune_field(
    parent: Schema, obj: dict[str, Any], key: str, path: str, unknown: list[str]
) -> None:
    child = _child_schema(parent, key)
    field_path = _join(path, key)
    if child is None:
        unknown.append(field_path)
        del obj[key]
        return
    if child is True:
        return
    assert isinstance(child, dict)
    if obj[key] is None and not child.get("nullable"):
        del obj[key]  # null for a non-nullable field is dropped before defaulting
        return
    _prune_value(child, obj[key], field_path, unknown)


def _prune_value(schema: Schema, value: Any, path: str, unknown: list[str]) -> None:
    if isinstance(value, dict) and schema.get("type", "object") == "object":
        for key in list(value):
            _prune_field(schema, value, key, path, unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune_value(schema["items"], item, f"{path}[{i}]", unknown)


def apply_defaults(schema: Schema, value: Any) -> None:
    """Fill `default:` values in place, for absent fields of present objects."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in props:
                    apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)


def validate(schema: Schema, obj: dict[str, Any]) -> list[FieldError]:
    """Errors of a whole object against the root schema (metadata is the server's job)."""
    root = dict(schema)
    root["properties"] = {
        k: v for k, v in (schema.get("properties") or {}).items() if k not in _ROOT_KEPT
    }
    root["required"] = [r for r in schema.get("required", []) if r not in _ROOT_KEPT]
    body = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    return _validate(root, body, "")


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _has_type(value: Any, expected: str) -> bool:
    actual = _type_name(value)
    if expected == "integer" and actual == "number":
        return float(value).is_integer()  # a whole float decodes as an int64
    if expected == "number":
        return actual in ("integer", "number")
    return actual == expected


def _validate(schema: Schema, value: Any, path: str) -> list[FieldError]:
    label = path or "<root>"
    if value is None:
        if schema.get("nullable"):
            return []
        if "type" in schema:
            return [
                FieldError(
                    "TypeInvalid",
                    label,
                    f'{label} in body must be of type {schema["type"]}: "null"',
                    "null",
                )
            ]
        return []
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if _type_name(value) not in ("integer", "string"):
            return [
                FieldError(
                    "TypeInvalid",
                    label,
                    f'{label} in body must be of type integer-or-string: "{_type_name(value)}"',
                    _type_name(value),
                )
            ]
    elif expected and not _has_type(value, expected):
        actual = _type_name(value)
        return [
            FieldError(
                "TypeInvalid",
                label,
                f'{label} in body must be of type {expected}: "{actual}"',
                actual,
            )
        ]
    errors = _check_value(schema, value, label)
    errors += _check_combinators(schema, value, path)
    if isinstance(value, dict):
        errors += _check_object(schema, value, path)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += _validate(schema["items"], item, f"{path}[{i}]")
    return errors


def _check_value(schema: Schema, value: Any, label: str) -> list[FieldError]:
    errors: list[FieldError] = []

    def bad(detail: str) -> None:
        errors.append(FieldError("Invalid", label, f"{label} in body {detail}", value))

    if "enum" in schema and value not in schema["enum"]:
        errors.append(
            FieldError("NotSupported", label, value=value, supported=tuple(schema["enum"]))
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema:
            if schema.get("exclusiveMinimum") is True and value <= schema["minimum"]:
                bad(f"should be greater than {schema['minimum']}")
            elif value < schema["minimum"]:
                bad(f"should be greater than or equal to {schema['minimum']}")
        if "maximum" in schema:
            if schema.get("exclusiveMaximum") is True and value >= schema["maximum"]:
                bad(f"should be less than {schema['maximum']}")
            elif value > schema["maximum"]:
                bad(f"should be less than or equal to {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            bad(f"should be at least {schema['minLength']} chars long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            bad(f"may not be more than {schema['maxLength']} bytes")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            bad(f"should match '{schema['pattern']}'")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            bad(f"should have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            bad(f"must have at most {schema['maxItems']} items")
    return errors


def _check_object(schema: Schema, value: dict[str, Any], path: str) -> list[FieldError]:
    errors = [
        FieldError("Required", _join(path, name))
        for name in schema.get("required", [])
        if name not in value
    ]
    label = path or "<root>"
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            FieldError(
                "Invalid",
                label,
                f"{label} in body should have at least {schema['minProperties']} properties",
                value,
            )
        )
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(
            FieldError(
                "Invalid",
                label,
                f"{label} in body should have at most {schema['maxProperties']} properties",
                value,
            )
        )
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            errors += _validate(props[key], item, _join(path, key))
        elif isinstance(extra, dict):
            errors += _validate(extra, item, _join(path, key))
        elif extra is False and not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(FieldError("Forbidden", _join(path, key), "field not declared in schema"))
    return errors


def _check_combinators(schema: Schema, value: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for sub in schema.get("allOf", []):
        errors += _validate(sub, value, path)
    label = path or "<root>"
    if "anyOf" in schema and not any(not _validate(s, value, path) for s in schema["anyOf"]):
        errors.append(
            FieldError("Invalid", label, "must validate at least one schema (anyOf)", value)
        )
    if "oneOf" in schema:
        passing = sum(1 for s in schema["oneOf"] if not _validate(s, value, path))
        if passing != 1:
            errors.append(
                FieldError("Invalid", label, "must validate one and only one schema (oneOf)", value)
            )
    if "not" in schema and not _validate(schema["not"], value, path):
        errors.append(FieldError("Invalid", label, "must not validate the schema (not)", value))
    return errors
