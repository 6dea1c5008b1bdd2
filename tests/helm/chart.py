"""Rendering helm/gpuflow with the real helm, and builders to look into the result.

Values are given as nested keys in Python (`{"api": {"mode": "cluster"}}` or the
flat `api__mode="cluster"` form the `render` fixture takes) and handed to helm as one
JSON values file, so types are exact (no --set string guessing).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gpuflow"
RELEASE = "gf"
NAMESPACE = "gpuflow-system"

Obj = dict[str, Any]

# The value sets the tests render (flat keys, see nest()).
DB_URL = "postgresql://gpuflow:s3cret@db.example.com:5432/gpuflow"
BROKER_URL = "redis://:pw@redis.example.com:6379/0"
EXTERNAL: dict[str, object] = {
    "postgresql__enabled": False,
    "redis__enabled": False,
    "externalDatabase__url": DB_URL,
    "externalRedis__url": BROKER_URL,
}
USER_SECRETS: dict[str, object] = {
    "postgresql__enabled": False,
    "redis__enabled": False,
    "externalDatabase__existingSecret": "my-db",
    "externalDatabase__existingSecretKey": "url",
    "externalRedis__existingSecret": "my-redis",
}
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "external": EXTERNAL,
    "user-secrets": USER_SECRETS,
    "no-agent": {"agent__enabled": False},
    "cluster-api": {"api__mode": "cluster", "api__replicas": 3},
    "local-api": {"api__mode": "local"},
}


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr, then its stdout."""


def nest(flat: dict[str, object]) -> Obj:
    """{"api__mode": "cluster"} -> {"api": {"mode": "cluster"}}."""
    out: Obj = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


@dataclass(frozen=True)
class Helm:
    binary: str

    def run(self, *args: str) -> str:
        result = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, timeout=60, check=False
        )
        if result.returncode != 0:
            # lint reports what failed on stdout, the rest on stderr
            raise HelmError(f"{result.stderr.strip()}\n{result.stdout.strip()}".strip())
        return result.stdout

    def template(self, values: dict[str, object]) -> Manifests:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(nest(values), f)
            f.flush()
            out = self.run(
                "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                "--include-crds", "--values", f.name,
            )  # fmt: skip
        return Manifests(out)

    def lint(self, values: dict[str, object]) -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(nest(values), f)
            f.flush()
            return self.run("lint", "--strict", str(CHART), "--values", f.name)


class Manifests:
    """The documents of one render, with lookups by kind, name and component."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.docs: list[Obj] = [d for d in yaml.safe_load_all(text) if d]

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.docs)

    def kinds(self) -> list[str]:
        return sorted(d["kind"] for d in self.docs)

    def of_kind(self, kind: str) -> list[Obj]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> Obj:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
        return found[0]

    def component(self, kind: str, component: str) -> Obj:
        """The one object of `kind` labelled app.kubernetes.io/component=component."""
        found = [d for d in self.of_kind(kind) if component_of(d) == component]
        assert len(found) == 1, f"{kind} of component {component}: {len(found)} found"
        return found[0]

    def has(self, kind: str, component: str) -> bool:
        return any(component_of(d) == component for d in self.of_kind(kind))


def component_of(obj: Obj) -> str | None:
    labels = obj["metadata"].get("labels") or {}
    value = labels.get("app.kubernetes.io/component")
    return None if value is None else str(value)


def name(component: str) -> str:
    """The chart's name for a component of release RELEASE: gf-gpuflow-<component>."""
    return f"{RELEASE}-gpuflow-{component}"


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Obj) -> Obj:
    containers: list[Obj] = pod_spec(workload)["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(c: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in c.get("env", [])}


def rules_of(role: Obj) -> dict[tuple[str, str], list[str]]:
    """{(apiGroup, resource): sorted verbs} over a role's rules."""
    out: dict[tuple[str, str], list[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs = set(out.get((group, resource), [])) | set(rule["verbs"])
                out[(group, resource)] = sorted(verbs)
    return out


def bound_role(m: Manifests, service_account: str) -> Obj:
    """The one ClusterRole bound to the ServiceAccount (in NAMESPACE) by a binding."""
    roles = [
        m.get("ClusterRole", b["roleRef"]["name"])
        for b in m.of_kind("ClusterRoleBinding")
        if {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE}
        in b["subjects"]
    ]
    assert len(roles) == 1, f"{len(roles)} ClusterRoles bound to {service_account}"
    return roles[0]
