"""helm/gpuflow rendered by the real helm (3.17): lint, and what each variant must hold.

Variants: the defaults (bundled PostgreSQL and Redis, node agent, API in cluster mode);
external PostgreSQL/Redis by URL and by a Secret of the user's; no node agent; the API
in cluster mode with replicas; the API in local mode. Values that cannot work together
must fail at template time (test_values_schema.py: each value on its own).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from kubernetes import client  # type: ignore[import-untyped]

from tests.helm.chart import (
    BROKER_URL,
    CHART,
    DB_URL,
    NAMESPACE,
    USER_SECRETS,
    VARIANTS,
    Helm,
    HelmError,
    Manifests,
    Obj,
    bound_role,
    component_of,
    container,
    env_of,
    name,
    pod_spec,
    rules_of,
)

Render = Callable[..., Manifests]

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")

# What the operator calls (operators/kube/__init__.py, kube_dljobs.py, docs/operator.md), exactly.
OPERATOR_RULES = {
    ("gpuflow.dev", "dljobs"): ["get", "list", "update", "watch"],
    ("gpuflow.dev", "dljobs/status"): ["update"],
    ("gpuflow.dev", "quotas"): ["list"],
    ("gpuflow.dev", "quotas/status"): ["update"],
    ("gpuflow.dev", "queues"): ["list"],  # the deprecated Queue kind, for one release
    ("gpuflow.dev", "queues/status"): ["update"],
    ("", "pods"): ["create", "delete", "list", "patch", "watch"],
    ("", "services"): ["create"],
    ("", "events"): ["create"],
    ("", "nodes"): ["list", "patch", "watch"],
    ("coordination.k8s.io", "leases"): ["create", "get", "update"],
    ("", "configmaps"): ["create", "get", "update"],
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint(helm: Helm, variant: str) -> None:
    out = helm.lint(VARIANTS[variant])
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_document_is_well_formed(render: Render, variant: str) -> None:
    m = render(**VARIANTS[variant])
    seen: set[tuple[str, str]] = set()
    for doc in m:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
        if doc["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, key
    assert "<no value>" not in m.text


@pytest.mark.parametrize("variant", VARIANTS)
def test_typed_by_the_kubernetes_models(render: Render, variant: str) -> None:
    """Each object survives a round trip through the official client's typed models:
    no unknown or misspelled field (they would be dropped), no wrong type, no missing
    required field (the models refuse None there)."""
    api = client.ApiClient()
    for doc in render(**VARIANTS[variant]):
        model = api._ApiClient__deserialize(doc, f"V1{doc['kind']}")
        assert api.sanitize_for_serialization(model) == doc, doc["kind"]


def test_crds_are_the_ones_in_crds(render: Render) -> None:
    dljob, queue, quota = sorted(
        render().of_kind("CustomResourceDefinition"), key=lambda c: c["metadata"]["name"]
    )
    assert dljob == yaml.safe_load((CHART / "crds" / "dljob.yaml").read_text())
    assert dljob["metadata"]["name"] == "dljobs.gpuflow.dev"
    assert quota == yaml.safe_load((CHART / "crds" / "quota.yaml").read_text())
    assert quota["metadata"]["name"] == "quotas.gpuflow.dev"
    assert quota["spec"]["scope"] == "Cluster"
    # The deprecated kind: the same schema under its old names, its version deprecated.
    assert queue == yaml.safe_load((CHART / "crds" / "queue.yaml").read_text())
    assert queue["metadata"]["name"] == "queues.gpuflow.dev"
    [old], [new] = queue["spec"]["versions"], quota["spec"]["versions"]
    assert old.pop("deprecated") is True and "quotas migrate" in old.pop("deprecationWarning")
    assert old["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].keys() == (
        new["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].keys()
    )


def test_operator_deployment_and_exact_rbac(render: Render) -> None:
    m = render()
    deploy = m.component("Deployment", "operator")
    spec = pod_spec(deploy)
    assert spec["serviceAccountName"] == name("operator")
    m.get("ServiceAccount", name("operator"))
    assert rules_of(bound_role(m, name("operator"))) == OPERATOR_RULES
    c = container(deploy)
    assert c["args"][:2] == ["operator", "run"]
    assert f"--lease-namespace={NAMESPACE}" in c["args"]
    assert "--policy=fifo" in c["args"] and "--placement=consolidated" in c["args"]
    assert "--network=fair" in c["args"]
    assert "--identity=$(POD_NAME)" in c["args"]
    assert env_of(c)["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert deploy["spec"]["replicas"] == 2  # leader election: a standby takes over


def test_operator_options(render: Render) -> None:
    m = render(
        operator__policy="tiresias",
        operator__placement="topology-aware",
        operator__watchNamespace="team-a",
    )
    args = container(m.component("Deployment", "operator"))["args"]
    assert {"--policy=tiresias", "--placement=topology-aware", "--namespace=team-a"} <= set(args)


def test_operator_throughput_matrix_from_the_users_configmap(render: Render) -> None:
    """operator.throughputs names a ConfigMap of the user's: mounted read-only and handed
    to `operator run --throughputs`; without one, neither the flag nor a volume."""
    plain = render().component("Deployment", "operator")
    assert not [a for a in container(plain)["args"] if a.startswith("--throughputs")]
    assert "volumes" not in pod_spec(plain)
    deploy = render(
        operator__throughputs__configMap="gavel-throughputs",
        operator__throughputs__key="throughputs.json.gz",
    ).component("Deployment", "operator")
    c = container(deploy)
    assert "--throughputs=/etc/gpuflow/throughputs/throughputs.json.gz" in c["args"]
    [mount] = c["volumeMounts"]
    assert mount == {
        "name": "throughputs",
        "mountPath": "/etc/gpuflow/throughputs",
        "readOnly": True,
    }
    [volume] = pod_spec(deploy)["volumes"]
    assert volume == {"name": "throughputs", "configMap": {"name": "gavel-throughputs"}}


def test_agent_daemonset(render: Render) -> None:
    m = render()
    ds = m.component("DaemonSet", "agent")
    spec = pod_spec(ds)
    assert spec["hostNetwork"] is True
    assert spec["hostPID"] is True  # NVML's pids are the host's: their cgroups name pods
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    c = container(ds)
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert c["args"][:3] == ["agent", "run", "--node-name=$(NODE_NAME)"]
    assert env_of(c)["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "resources" in c and "nvidia.com/gpu" not in str(c["resources"])
    assert spec["serviceAccountName"] == name("agent")
    assert rules_of(bound_role(m, name("agent"))) == {
        ("", "nodes"): ["get", "patch"],
        ("", "nodes/status"): ["patch"],  # its GpuModelUnknown condition
        ("", "pods"): ["list", "watch"],  # the pods on its node, to shape their egress
    }
    assert {"--enforce-bandwidth", "--leaf-qdisc=fq_codel", "--sharing=mps"} <= set(c["args"])
    assert not any(a.startswith("--interface") for a in c["args"])  # the default route's
    args = container(render(agent__enforceBandwidth=False, agent__interface="ens5").component(
        "DaemonSet", "agent"))["args"]  # fmt: skip
    assert {"--no-enforce-bandwidth", "--interface=ens5"} <= set(args)


def test_no_agent(render: Render) -> None:
    m = render(agent__enabled=False)
    assert not m.of_kind("DaemonSet")
    assert not any(component_of(d) == "agent" for d in m)
    assert m.has("Deployment", "operator")


def _secret_ref(c: Obj, var: str) -> tuple[str, str]:
    ref = env_of(c)[var]["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def _secret_value(m: Manifests, ref: tuple[str, str]) -> str:
    value: str = m.get("Secret", ref[0])["stringData"][ref[1]]
    return value


@pytest.mark.parametrize("variant", ["default", "external"])
def test_api_and_worker_get_urls_from_the_secret(render: Render, variant: str) -> None:
    m = render(**VARIANTS[variant])
    api = m.component("Deployment", "api")
    worker = m.component("Deployment", "worker")
    for workload in (api, worker):
        c = container(workload)
        db = _secret_value(m, _secret_ref(c, "GPUFLOW_DATABASE_URL"))
        broker = _secret_value(m, _secret_ref(c, "GPUFLOW_BROKER_URL"))
        if variant == "external":
            assert (db, broker) == (DB_URL, BROKER_URL)
        else:
            assert db.startswith("postgresql://gpuflow:") and db.endswith(
                f"@{name('postgresql')}.{NAMESPACE}.svc:5432/gpuflow"
            )
            assert broker.startswith("redis://:")
            assert broker.endswith(f"@{name('redis')}.{NAMESPACE}.svc:6379/0")
        (config,) = c["envFrom"]
        data = m.get("ConfigMap", config["configMapRef"]["name"])["data"]
        assert data["GPUFLOW_DATA_DIR"]
        assert data["GPUFLOW_REPLAY_CONCURRENCY"] == "4"  # 2 workers x 2 slots: all sent at once
    assert container(worker)["command"] == ["celery"]
    assert container(worker)["args"][:3] == ["-A", "api.tasks", "worker"]


def test_api_service_reaches_the_api_pods(render: Render) -> None:
    m = render(api__mode="local")
    api = m.component("Deployment", "api")
    svc = m.component("Service", "api")
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    c = container(api)
    assert port["targetPort"] in [p["name"] for p in c["ports"]]
    assert c["args"] == ["serve", "--host=0.0.0.0", "--port=8000"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    config = m.component("ConfigMap", "config")["data"]
    assert config["GPUFLOW_CLUSTER"] == "16x4" and config["GPUFLOW_POLICY"] == "fifo"
    assert "GPUFLOW_IN_CLUSTER" not in env_of(c)
    assert api["spec"]["strategy"] == {"type": "Recreate"}  # one simulated cluster
    assert pod_spec(api)["automountServiceAccountToken"] is False


def test_the_default_api_manages_the_cluster(render: Render) -> None:
    m = render()
    api = m.component("Deployment", "api")
    assert env_of(container(api))["GPUFLOW_IN_CLUSTER"]["value"] == "true"
    assert pod_spec(api)["automountServiceAccountToken"] is True
    assert "strategy" not in api["spec"]
    assert "GPUFLOW_CLUSTER" not in m.component("ConfigMap", "config")["data"]


def test_cluster_mode_api(render: Render) -> None:
    m = render(api__mode="cluster", api__replicas=3, api__workers=4)
    api = m.component("Deployment", "api")
    assert api["spec"]["replicas"] == 3 and "strategy" not in api["spec"]
    assert "--workers=4" in container(api)["args"]
    spec = pod_spec(api)
    assert spec["automountServiceAccountToken"] is True
    assert rules_of(bound_role(m, spec["serviceAccountName"])) == {
        ("gpuflow.dev", "dljobs"): ["create", "delete", "get", "list", "watch"],
        ("gpuflow.dev", "dljobs/status"): ["get", "update"],
        ("gpuflow.dev", "quotas"): ["create", "delete", "get", "list", "update"],
        ("gpuflow.dev", "queues"): ["delete", "list"],
        ("", "nodes"): ["list", "patch", "watch"],
        ("", "secrets"): ["create", "delete", "get", "update"],
        ("", "configmaps"): ["create", "get", "update"],
        ("", "pods"): ["list"],
        ("", "pods/log"): ["get"],
    }
    env = env_of(container(api))
    assert env["GPUFLOW_IN_CLUSTER"]["value"] == "true"
    assert env["GPUFLOW_KUBE_NAMESPACE"]["value"] == NAMESPACE
    # Worker pods report to the API's service (GPUFLOW_API_URL); in local mode, nowhere.
    url = f"--api-url=http://{name('api')}.{NAMESPACE}.svc:80/api/v1"
    assert url in container(m.component("Deployment", "operator"))["args"]
    local = container(render(api__mode="local").component("Deployment", "operator"))["args"]
    assert not [a for a in local if a.startswith("--api-url")]
    assert "GPUFLOW_CLUSTER" not in m.component("ConfigMap", "config")["data"]
    assert "GPUFLOW_IN_CLUSTER" not in env_of(container(m.component("Deployment", "worker")))
    m = render(
        api__mode="cluster", api__cluster__jobNamespace="ml", api__cluster__defaultJobImage="t:1"
    )
    env = env_of(container(m.component("Deployment", "api")))
    assert (
        env["GPUFLOW_KUBE_NAMESPACE"]["value"] == "ml"
        and env["GPUFLOW_KUBE_IMAGE"]["value"] == "t:1"
    )


def test_bundled_databases_only_when_enabled(render: Render) -> None:
    bundled = render()
    for component, port in (("postgresql", 5432), ("redis", 6379)):
        sts = bundled.component("StatefulSet", component)
        svc = bundled.component("Service", component)
        assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
        assert svc["spec"]["ports"][0]["port"] == port
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "data"
    pg_env = env_of(container(bundled.component("StatefulSet", "postgresql")))
    assert pg_env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "postgres-password"
    for variant in ("external", "user-secrets"):
        m = render(**VARIANTS[variant])
        assert not m.of_kind("StatefulSet")
        assert not m.has("Service", "postgresql") and not m.has("Service", "redis")


def test_user_secrets_are_referenced_not_written(render: Render) -> None:
    m = render(**USER_SECRETS)
    assert not m.of_kind("Secret")
    for kind, component in (("Deployment", "api"), ("Deployment", "worker"), ("Job", "migrate")):
        c = container(m.component(kind, component))
        assert _secret_ref(c, "GPUFLOW_DATABASE_URL") == ("my-db", "url")
    c = container(m.component("Deployment", "api"))
    assert _secret_ref(c, "GPUFLOW_BROKER_URL") == ("my-redis", "broker-url")


def test_bundled_passwords_are_random_unless_given(render: Render) -> None:
    first = render()
    again = render(api__port=8000)  # another render of the same values
    pw = [m.component("Secret", "connections")["stringData"]["postgres-password"]
          for m in (first, again)]  # fmt: skip
    assert len(pw[0]) == 32 and pw[0] != pw[1]
    given = render(postgresql__auth__password="p@ss word")
    url = given.component("Secret", "connections")["stringData"]["database-url"]
    assert url.startswith("postgresql://gpuflow:p%40ss+word@")


@pytest.mark.parametrize(
    ("variant", "install_hook"),
    [("default", "post-install"), ("external", "pre-install"), ("user-secrets", "pre-install")],
)
def test_migration_job_is_a_hook(render: Render, variant: str, install_hook: str) -> None:
    m = render(**VARIANTS[variant])
    job = m.component("Job", "migrate")
    notes = job["metadata"]["annotations"]
    assert notes["helm.sh/hook"].split(",") == [install_hook, "pre-upgrade"]
    assert "before-hook-creation" in notes["helm.sh/hook-delete-policy"]
    c = container(job)
    assert c["command"] == ["alembic", "-c", "/app/alembic.ini", "upgrade", "head"]
    assert "GPUFLOW_DATABASE_URL" in env_of(c)
    assert pod_spec(job)["restartPolicy"] == "Never"
    if variant != "user-secrets":
        # The Secret the Job reads is a hook too, created before it (lower weight).
        secret = m.component("Secret", "connections")["metadata"]["annotations"]
        assert secret["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert int(secret["helm.sh/hook-weight"]) < int(notes["helm.sh/hook-weight"])


def test_no_migration_job_when_disabled(render: Render) -> None:
    assert not render(migrations__enabled=False).of_kind("Job")


@pytest.mark.parametrize("variant", VARIANTS)
def test_references_resolve(render: Render, variant: str) -> None:
    """Selectors select their pod templates; ServiceAccounts, ConfigMaps and the
    chart's Secret that pods name are rendered (or are the user's own Secrets)."""
    m = render(**VARIANTS[variant])
    user_secrets = {"my-db", "my-redis"}
    for workload in (d for d in m if d["kind"] in WORKLOADS):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        if workload["kind"] != "Job":
            assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        spec = pod_spec(workload)
        if "serviceAccountName" in spec:
            m.get("ServiceAccount", spec["serviceAccountName"])
        for c in spec["containers"]:
            assert c["image"] in ("gpuflow:0.1.0", "postgres:16-alpine", "redis:7-alpine")
            for source in c.get("envFrom", []):
                m.get("ConfigMap", source["configMapRef"]["name"])
            for var in c.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in user_secrets:
                    assert ref["key"] in m.get("Secret", ref["name"])["stringData"]
    for svc in m.of_kind("Service"):
        selector = svc["spec"]["selector"].items()
        pods = [w["spec"]["template"]["metadata"]["labels"] for w in m if w["kind"] in WORKLOADS]
        selected = [labels for labels in pods if selector <= labels.items()]
        assert len(selected) == 1, svc["metadata"]["name"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"postgresql__enabled": False}, "needs externalDatabase.url"),
        ({"redis__enabled": False}, "needs externalRedis.url"),
        ({"api__mode": "local", "api__replicas": 2}, "api.replicas must be 1"),
        ({"api__mode": "local", "api__workers": 2}, "api.workers must be 1"),
    ],
)
def test_values_that_cannot_work_fail(helm: Helm, values: dict[str, object], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        helm.template(values)


def test_policy_options_reach_the_operator(render: Render) -> None:
    m = render(operator__policyOptions={"pollux:interval_s": 30, "quantum_s": 120.5})
    args = container(m.component("Deployment", "operator"))["args"]
    assert "--policy-opt=pollux:interval_s=30" in args
    assert "--policy-opt=quantum_s=120.5" in args
