"""The sandbox operator's identity: the chart's ServiceAccount and RBAC, not the admin's.

On a cluster the operator runs as the chart's ServiceAccount, bound to the ClusterRole
of helm/gpuflow/templates/operator-rbac.yaml, and a verb that role lacks is a 403 from
the API server. gpuflow/sandbox/cluster.py (`Sandbox.start_operator`) calls
`create_operator_identity` so that the sandbox's operator thread runs under the same
rules: it creates the ServiceAccount, a ClusterRole with the chart's rules (read from
the template itself, so the two cannot drift) and the ClusterRoleBinding, asks the
TokenRequest API for a token of the ServiceAccount and writes a kubeconfig with it.
The operator's Forbidden then reads as on a cluster:
`User "system:serviceaccount:default:gpuflow-operator" cannot create resource "pods"`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes  # type: ignore[import-untyped]
import yaml

from gpuflow.sandbox.controlplane import write_kubeconfig
from operators.kube import ALREADY_EXISTS, ApiException, KubeApi

Obj = dict[str, Any]

OPERATOR_RBAC = (
    Path(__file__).resolve().parents[2] / "helm" / "gpuflow" / "templates" / "operator-rbac.yaml"
)
# The chart's names for release `gpuflow` (its componentName: "<release>-operator"
# once the fullname collapses to the release name), in the sandbox's one namespace.
NAME = "gpuflow-operator"
NAMESPACE = "default"
# The operator's client reads its token once; a sandbox lasts a working session, and
# kube-apiserver here sets no --service-account-max-token-expiration to cap it.
TOKEN_S = 7 * 24 * 3600


class ChartRulesError(ValueError):
    """The chart's operator-rbac.yaml has no ClusterRole with a rules list."""


def chart_rules(path: Path = OPERATOR_RBAC) -> list[Obj]:
    """The `rules:` of the ClusterRole in the chart's operator RBAC template.

    The template is Go-templated YAML; the rules themselves carry no template
    directive (tests/sandbox/test_operator_identity.py checks them against `helm
    template`), so the block from `rules:` to the end of the ClusterRole's document
    parses as YAML on its own."""
    for document in path.read_text().split("\n---\n"):
        if "\nkind: ClusterRole\n" not in f"\n{document}\n":
            continue
        _, found, rules = document.partition("\nrules:\n")
        if found:
            parsed = yaml.safe_load("rules:\n" + rules)
            if isinstance(parsed, dict) and isinstance(parsed.get("rules"), list):
                return list(parsed["rules"])
    raise ChartRulesError(f"{path}: no ClusterRole with rules")


@dataclass(frozen=True)
class OperatorIdentity:
    """What `create_operator_identity` made: the user the API server sees and its
    kubeconfig."""

    user: str
    kubeconfig: Path


def create_operator_identity(
    api: KubeApi, kubeconfig: Path, rules: list[Obj] | None = None
) -> OperatorIdentity:
    """The ServiceAccount NAMESPACE/NAME bound to a ClusterRole NAME of `rules` (the
    chart's by default), and a kubeconfig at `kubeconfig` with a token of it, for the
    admin's `api` server. Objects left from an earlier call are kept (the role's rules
    replaced), so that a second operator of the same sandbox shares them."""
    core = api.core
    rbac = kubernetes.client.RbacAuthorizationV1Api(api.client)
    meta = {"name": NAME, "labels": {"app.kubernetes.io/component": "operator"}}
    _create(lambda: core.create_namespaced_service_account(NAMESPACE, {"metadata": meta}))
    role = {"metadata": meta, "rules": chart_rules() if rules is None else rules}
    try:
        rbac.create_cluster_role(role)
    except ApiException as exc:
        if exc.status != ALREADY_EXISTS:
            raise
        rbac.replace_cluster_role(NAME, role)
    binding = {
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }
    _create(lambda: rbac.create_cluster_role_binding(binding))
    request = {"spec": {"expirationSeconds": TOKEN_S}}
    token = core.create_namespaced_service_account_token(NAME, NAMESPACE, request).status.token
    user = f"system:serviceaccount:{NAMESPACE}:{NAME}"
    config = api.client.configuration
    write_kubeconfig(kubeconfig, config.host, Path(config.ssl_ca_cert), user, token)
    kubeconfig.chmod(0o600)
    return OperatorIdentity(user, kubeconfig)


def _create(fn: Any) -> None:
    try:
        fn()
    except ApiException as exc:
        if exc.status != ALREADY_EXISTS:
            raise
