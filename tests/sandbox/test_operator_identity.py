"""The sandbox's operator runs as the chart's operator ServiceAccount under the chart's
ClusterRole (gpuflow/sandbox/operator_identity.py), not as the admin: the API server
knows it by the ServiceAccount's name, and a verb taken from its role is refused to it
with a 403 that the DLJob's condition names, as tests/helm/test_install.py shows of the
chart's own operator pod."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from gpuflow.sandbox.cluster import Sandbox, SandboxConfig
from gpuflow.sandbox.operator_identity import (
    ChartRulesError,
    chart_rules,
    create_operator_identity,
)
from tests.helm.chart import Manifests, bound_role, name
from tests.helm.conftest import helm, render
from tests.operators.builders import make_dljob
from tests.waiting import wait_for

__all__ = ["helm", "render"]

USER = "system:serviceaccount:default:gpuflow-operator"


def test_the_rules_are_those_helm_renders_for_the_operator(render: Any) -> None:
    manifests: Manifests = render()
    role = bound_role(manifests, name("operator"))
    assert chart_rules() == role["rules"]
    pods = next(r for r in chart_rules() if r["resources"] == ["pods"])
    assert "create" in pods["verbs"]  # what the refusal below takes away


def test_a_template_without_a_role_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "operator-rbac.yaml"
    path.write_text("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n")
    with pytest.raises(ChartRulesError, match="no ClusterRole with rules"):
        chart_rules(path)


def whoami(client: Any) -> tuple[str, list[str]]:
    """The user and groups the API server sees for `client` (a SelfSubjectReview)."""
    review = kubernetes.client.AuthenticationV1Api(client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    info = review.status.user_info
    return info.username, list(info.groups or [])


def refused_creates(sb: Sandbox) -> float:
    """The pod creates the API server has refused the sandbox's operator with 403."""
    assert sb.operator is not None
    labels = {"verb": "create", "resource": "pods", "code": "403"}
    got = sb.operator.metrics.registry.get_sample_value("gpuflow_operator_api_errors_total", labels)
    return got or 0.0


def without(rules: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(rules)
    rule = next(r for r in out if r["resources"] == [resource])
    rule["verbs"].remove(verb)
    return out


@pytest.mark.slow  # a sandbox of its own: its control plane, service and operator
def test_the_operator_is_the_service_account_and_a_verb_its_role_lacks_is_refused(
    tmp_path: Path,
) -> None:
    config = SandboxConfig(nodes=1, gpus_per_node=1, directory=tmp_path / "sandbox")
    with Sandbox(config) as sb:
        assert sb.operator is not None and sb.operator_identity is not None
        assert sb.operator_identity.user == USER
        user, groups = whoami(sb.operator.api.client)
        assert user == USER
        assert "system:serviceaccounts" in groups and "system:masters" not in groups
        # The admin takes `create` on pods from the operator's ClusterRole.
        create_operator_identity(
            sb.api, tmp_path / "again.kubeconfig", without(chart_rules(), "pods", "create")
        )
        sb.api.create_dljob("default", make_dljob("refused", 1))

        def status() -> dict[str, Any]:
            got: dict[str, Any] = sb.api.get_dljob("default", "refused").get("status") or {}
            return got

        def forbidden() -> dict[str, Any] | None:
            # One read: every round starts the job again (Admitted, Scheduled) and the
            # refusal sends it back to Queued, so a second read may see the start.
            got = status()
            return got if got.get("reason") == "Forbidden" else None

        got = wait_for("the DLJob to wait with reason Forbidden", forbidden, 60, every_s=0.2)
        pods = sb.api.core.list_namespaced_pod("default").items
        # The refused job waits out a back-off before each try (1 s, 2 s, ...): in 6 s
        # two more refusals (at most four), where every round (20 a second) tried before.
        before = refused_creates(sb)
        time.sleep(6.0)
        tries = refused_creates(sb) - before
    assert 1 <= tries <= 4, tries
    assert "restartAfter" in got
    assert got["phase"] == "Queued" and got.get("attempt", 0) == 0
    queued = next(c for c in got["conditions"] if c["type"] == "Queued")
    assert queued["reason"] == "Forbidden"
    # The API server's words: who was refused, which verb, which resource.
    assert f'User "{USER}" cannot create resource "pods"' in queued["message"], queued
    assert pods == []
