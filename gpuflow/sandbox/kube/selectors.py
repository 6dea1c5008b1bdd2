"""Label and field selectors, parsed and matched like k8s.io/apimachinery does.

Built by `routing.py` from a request's query; matched by `store.py` (list,
deletecollection) and `watch.py` (watch). Label selectors: `k=v`, `k==v`, `k!=v`,
`k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>n`, `k<n`, comma-joined (AND).
Field selectors: `f=v`, `f==v`, `f!=v` on the fields a resource registers
(`ResourceType.selectable_fields`); any other field is a 400 as on a real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuflow.sandbox.kube.errors import bad_request

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\((.*)\)\s*$")
_OP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in | notin | exists | !exists | gt | lt
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        if self.op == "notin":
            return labels.get(self.key) not in self.values
        value = labels.get(self.key)
        if value is None or not value.lstrip("-").isdigit():
            return False
        (bound,) = self.values
        return int(value) > int(bound) if self.op == "gt" else int(value) < int(bound)


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in (t.strip() for t in terms) if t]


def parse_labels(selector: str) -> list[Requirement]:
    reqs = []
    for term in _split_terms(selector):
        if m := _SET_RE.match(term):
            values = frozenset(v.strip() for v in m.group(4).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(3), values))
        elif m := _OP_RE.match(term):
            key, op, value = m.group(1), m.group(3), m.group(4)
            if op in (">", "<"):
                if not value.lstrip("-").isdigit():
                    raise bad_request(
                        f"unable to parse requirement: for 'gt', 'lt' operators, "
                        f"the value must be an integer: {term}"
                    )
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", frozenset({value})))
            else:
                reqs.append(Requirement(key, "notin" if op == "!=" else "in", frozenset({value})))
        elif m := _EXISTS_RE.match(term):
            reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: invalid label selector: {term!r}")
    return reqs


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) != self.negate


# Field-selector labels whose object path differs from the label (events' `source`).
_FIELD_PATHS = {"source": "source.component"}


def field_value(obj: Mapping[str, Any], label: str) -> str:
    node: Any = obj
    for part in _FIELD_PATHS.get(label, label).split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_fields(selector: str, allowed: frozenset[str]) -> list[FieldRequirement]:
    reqs = []
    for term in _split_terms(selector):
        for op in ("!=", "==", "="):
            if op in term:
                field, value = (s.strip() for s in term.split(op, 1))
                break
        else:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        if field not in allowed:
            raise bad_request(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, value, op == "!="))
    return reqs


Matcher = Callable[[Mapping[str, Any]], bool]


def matcher(label_selector: str, field_selector: str, allowed_fields: frozenset[str]) -> Matcher:
    """One predicate for both selectors; raises 400 on a malformed selector."""
    labels = parse_labels(label_selector)
    fields = parse_fields(field_selector, allowed_fields)

    def match(obj: Mapping[str, Any]) -> bool:
        obj_labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(obj_labels) for r in labels) and all(f.matches(obj) for f in fields)

    return match
