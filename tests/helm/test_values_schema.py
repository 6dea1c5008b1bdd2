"""helm/gpuflow/values.schema.json with the real helm: bad values refused by name at
lint, template and install time; values.yaml, every variant and every registered
policy and placement accepted."""

from __future__ import annotations

import json
import tempfile

import pytest

from controller.network.registry import live_names
from controller.placement import PLACERS
from gpuflow.sandbox.controlplane import ControlPlane
from policies.registry import policy_names
from tests.helm.chart import CHART, NAMESPACE, RELEASE, VARIANTS, Helm, HelmError, nest

DRY_RUN_NAMESPACE = f"{NAMESPACE}-dry-run"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# (values, what helm's message must name)
BAD: list[tuple[dict[str, object], str]] = [
    ({"operator__replicas": "abc"}, "operator.replicas: Invalid type. Expected: integer"),
    ({"api__mode": "foo"}, 'api.mode must be one of the following: "cluster", "local"'),
    ({"api__port": -1}, "api.port: Must be greater than or equal to 1"),
    ({"api__service__port": 70000}, "api.service.port: Must be less than or equal to 65535"),
    ({"operator__policy": "lottery"}, "operator.policy must be one of the following"),
    (
        {"api__local__policy": "lottery"},
        "api.local.policy must be one of the following",
    ),
    ({"operator__placement": "best"}, "operator.placement must be one of the following"),
    ({"operator__polcy": "fifo"}, "operator: Additional property polcy is not allowed"),
    ({"agent__intervalSeconds": 0}, "agent.intervalSeconds: Must be greater than 0"),
    ({"image__pullPolicy": "Sometimes"}, "image.pullPolicy must be one of the following"),
    ({"redis__persistence__size": "lots"}, "redis.persistence.size: Does not match pattern"),
    ({"operator__throughputs__key": "a/b.json"}, "operator.throughputs.key: Does not match"),
    ({"workers": {"replicas": 1}}, "Additional property workers is not allowed"),
]


@pytest.mark.parametrize(("values", "message"), BAD)
def test_template_refuses_bad_values_by_name(
    helm: Helm, values: dict[str, object], message: str
) -> None:
    with pytest.raises(HelmError) as exc:
        helm.template(values)
    assert "don't meet the specifications of the schema" in str(exc.value)
    assert message in str(exc.value)


@pytest.mark.parametrize(("values", "message"), BAD[:4])
def test_lint_refuses_bad_values_by_name(
    helm: Helm, values: dict[str, object], message: str
) -> None:
    with pytest.raises(HelmError, match="1 chart\\(s\\) failed") as exc:
        helm.lint(values)
    assert message in str(exc.value)


def test_install_dry_run_refuses_bad_values_by_name(
    helm: Helm, control_plane: ControlPlane
) -> None:
    """Against the session's real control plane; a dry run stores nothing there. Helm
    still looks for objects of the release that exist already, so the namespace is one
    no other test uses (test_kubectl.py applies part of the chart in NAMESPACE)."""

    def install(values: dict[str, object]) -> str:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(nest(values), f)
            f.flush()
            return helm.run(
                "install", RELEASE, str(CHART), "--namespace", DRY_RUN_NAMESPACE, "--dry-run",
                "--kubeconfig", str(control_plane.kubeconfig), "--values", f.name,
            )  # fmt: skip

    assert "STATUS: pending-install" in install({})  # good values pass
    for values, message in BAD[:4]:
        with pytest.raises(HelmError) as exc:
            install(values)
        assert "don't meet the specifications of the schema" in str(exc.value)
        assert message in str(exc.value)


def test_the_enums_are_the_registries() -> None:
    defs = SCHEMA["definitions"]
    assert defs["policy"]["enum"] == policy_names()
    assert defs["placement"]["enum"] == sorted(PLACERS)
    network = SCHEMA["properties"]["operator"]["properties"]["network"]
    assert network["enum"] == list(live_names())


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_and_placement_is_accepted(helm: Helm, policy: str) -> None:
    placement = sorted(PLACERS)[policy_names().index(policy) % len(PLACERS)]
    helm.template(
        {"operator__policy": policy, "operator__placement": placement, "api__local__policy": policy}
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_values_yaml_and_every_variant_pass(helm: Helm, variant: str) -> None:
    assert "0 chart(s) failed" in helm.lint(VARIANTS[variant])


def test_documented_variants_pass(helm: Helm) -> None:
    """The values docs/helm.md shows, all at once."""
    helm.template(
        {
            "operator__watchNamespace": "team-a",
            "operator__extraArgs": ["-v"],
            "agent__nodeSelector": {},
            "agent__priorityClassName": "system-node-critical",
            "api__mode": "cluster",
            "api__cluster__jobNamespace": "ml",
            "api__cluster__defaultJobImage": "registry.example.com/train:1",
            "api__extraEnv": [{"name": "X", "value": "1"}],
            "api__service__type": "LoadBalancer",
            "data__existingClaim": "gpuflow-data",
            "imagePullSecrets": [{"name": "registry"}],
            "commonLabels": {"team": "ml"},
            "postgresql__persistence__size": "20Gi",
            "worker__tolerations": [{"key": "k", "operator": "Exists"}],
        }
    )
