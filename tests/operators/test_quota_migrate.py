"""From Queue to Quota against the real control plane: a cluster's old Queue objects are
honoured (the operator's reader builds the tree from them, says to migrate, and writes
their status to them), a Quota of a Queue's name wins, and `gpuflow quotas migrate`
copies the Queues to Quotas with the real kubectl seeing both (operators/quotas/
resources.py, tree.py, migrate.py; gpuflow/quotas_cmd.py)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.model.quotas import GpuQuota
from gpuflow.cli import main
from operators import crd
from operators.quotas.migrate import copy_of
from operators.quotas.resources import QuotaApi, legacy
from operators.quotas.tree import QuotaReader, QuotaStatusWriter
from tests.kube.fixtures import KubeServer
from tests.operators.real_cluster import RealCluster
from tests.operators.test_kubectl import kubectl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quotas.yaml"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def old_example() -> str:
    """The example as a cluster from before Quota holds it: Queue objects."""
    return EXAMPLE.read_text().replace("kind: Quota", "kind: Queue")


def quota(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": crd.API_VERSION, "kind": crd.QUOTA_KIND, "metadata": {"name": name},
            "spec": spec}  # fmt: skip


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_old_queues_are_honoured_and_a_quota_wins(
    gpu_cluster: RealCluster, caplog: pytest.LogCaptureFixture
) -> None:
    api = gpu_cluster.api
    for obj in yaml.safe_load_all(old_example()):
        legacy(api).create(obj)
    reader = QuotaReader(api, every_s=0)
    with caplog.at_level(logging.WARNING, logger="operators.quotas.tree"):
        tree = reader.read()
    assert tree is not None and tree.names() == ["research", "team-a", "team-b", "team-c"]
    assert tree.node("team-b").limit == GpuQuota.of(96)  # type: ignore[union-attr]
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "deprecated Queues read as Quotas queues=research,team-a,team-b,team-c"
        ' migrate_with="gpuflow quotas migrate"'
    )
    # An admin's Quota of team-c's name replaces its Queue in the tree.
    QuotaApi(api).create(quota("team-c", parent="research", guarantee=20))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="operators.quotas.tree"):
        tree = reader.read()
    assert tree is not None and tree.node("team-c").guarantee == GpuQuota.of(20)  # type: ignore[union-attr]
    assert "queues=research,team-a,team-b " in caplog.records[0].getMessage()
    # Each status goes to the object the tree was read from.
    kinds = {o["metadata"]["name"]: o["kind"] for o in reader.objects}
    assert kinds == {"research": "Queue", "team-a": "Queue", "team-b": "Queue", "team-c": "Quota"}
    statuses = {n: {"phase": "Active", "allocatedGpus": i} for i, n in enumerate(kinds)}
    QuotaStatusWriter(api).write(reader.objects, statuses, "2026-01-01T00:00:00Z")
    assert (legacy(api).get("team-a") or {})["status"]["allocatedGpus"] == 1
    assert (QuotaApi(api).get("team-c") or {})["status"]["allocatedGpus"] == 3
    assert "status" not in (legacy(api).get("team-c") or {})


@pytest.mark.parametrize("gpu_cluster", [0], indirect=True)
def test_migrate_copies_queues_to_quotas(
    gpu_cluster: RealCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    api, kc = gpu_cluster.api, str(gpu_cluster.kubeconfig)
    kubectl(gpu_cluster, "apply", "-f", "-", stdin=old_example())
    kubectl(gpu_cluster, "label", "queue", "team-a", "owner=vision")
    # A Quota an admin already made for team-c, with another spec: kept, never overwritten.
    QuotaApi(api).create(quota("team-c", parent="research", guarantee=20))
    migrate = ["quotas", "migrate", "--kubeconfig", kc]

    assert main([*migrate, "--dry-run"]) == 1  # the conflict is an exit code
    assert capsys.readouterr().out.splitlines() == [
        "quota.gpuflow.dev/research created (dry run)",
        "quota.gpuflow.dev/team-a created (dry run)",
        "quota.gpuflow.dev/team-b created (dry run)",
        "quota.gpuflow.dev/team-c conflict: a Quota of this name has another spec; the Queue"
        " is kept (dry run)",
    ]
    assert QuotaApi(api).get("research") is None

    assert main(migrate) == 1
    assert capsys.readouterr().out.count(" created") == 3
    queues = {q["metadata"]["name"]: q for q in yaml.safe_load_all(old_example())}
    for name in ("research", "team-a", "team-b"):
        got = QuotaApi(api).get(name)
        assert got is not None and got["kind"] == "Quota"
        assert got["spec"] == {"weight": 1, **queues[name]["spec"]}  # the schema's default
        assert LAST_APPLIED not in (got["metadata"].get("annotations") or {})
    assert (QuotaApi(api).get("team-a") or {})["metadata"]["labels"] == {"owner": "vision"}
    assert (QuotaApi(api).get("team-c") or {})["spec"]["guarantee"] == 20
    reader = QuotaReader(api, every_s=0)
    reader.read()
    assert {o["kind"] for o in reader.objects} == {"Quota"}

    # Again, deleting the Queues whose Quotas hold their spec; team-c's stays.
    assert main([*migrate, "--delete", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == [
        {"name": "research", "result": "unchanged", "deleted": True},
        {"name": "team-a", "result": "unchanged", "deleted": True},
        {"name": "team-b", "result": "unchanged", "deleted": True},
        {"name": "team-c", "result": "conflict", "deleted": False},
    ]
    assert kubectl(gpu_cluster, "get", "queues", "-o", "name").split() == [
        "queue.gpuflow.dev/team-c"
    ]
    assert kubectl(gpu_cluster, "get", "quotas", "-o", "name").split() == [
        f"quota.gpuflow.dev/{n}" for n in ("research", "team-a", "team-b", "team-c")
    ]
    # The admin settles team-c: its Queue goes, and nothing is left to migrate.
    assert legacy(api).delete("team-c")
    assert main(migrate) == 0
    assert capsys.readouterr().out == "no Queue objects: nothing to migrate\n"


def test_the_copy_keeps_name_labels_annotations_and_spec() -> None:
    queue = {
        "apiVersion": crd.API_VERSION,
        "kind": "Queue",
        "metadata": {
            "name": "a",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"x": "1"},
            "annotations": {LAST_APPLIED: "{}", "note": "n"},
        },
        "spec": {"guarantee": 2},
        "status": {"phase": "Active"},
    }
    assert copy_of(queue) == {
        "apiVersion": crd.API_VERSION,
        "kind": "Quota",
        "metadata": {"name": "a", "labels": {"x": "1"}, "annotations": {"note": "n"}},
        "spec": {"guarantee": 2},
    }


def test_migrate_without_the_quota_crd_is_one_line(
    kube_server: KubeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quotas", "migrate", "--kubeconfig", str(kube_server.kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gpuflow: error: the Quota CRD is not installed: kubectl apply -f"
        " helm/gpuflow/crds/quota.yaml (helm upgrade does not add CRDs), then run this again\n"
    )


def test_migrate_without_an_api_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    assert main(["quotas", "migrate", "--kubeconfig", str(kubeconfig)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith("gpuflow: error: the API server: ") and "Connection refused" in line
