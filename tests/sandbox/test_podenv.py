"""How the process kubelet turns a container into a command line and an environment
(gpuflow/sandbox/kubelet/podenv.py) and writes a projected volume (volumes.py): the chart's
image's entrypoint, envFrom, the service-account volume. No API server: lookups and
tokens come from dicts, as the kubelet's would from the server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gpuflow.sandbox.kubelet.podenv import (
    EnvError,
    command_line,
    is_gpuflow_image,
    process_env,
    rewrite_service_url,
)
from gpuflow.sandbox.kubelet.volumes import Mounts, PodVolumes, Projections, VolumeError

VENV_BIN = Path(sys.executable).parent
OBJECTS: dict[tuple[str, str, str], dict[str, Any]] = {
    ("configmaps", "ns", "settings"): {"kind": "ConfigMap", "data": {"A": "1", "B": "2"}},
    ("secrets", "ns", "db"): {"kind": "Secret", "data": {"URL": "cG9zdGdyZXM6Ly8="}},
    ("configmaps", "ns", "kube-root-ca.crt"): {"kind": "ConfigMap", "data": {"ca.crt": "PEM"}},
}


def lookup(kind: str, ns: str, name: str) -> dict[str, Any] | None:
    return OBJECTS.get((kind, ns, name))


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": spec}


@pytest.mark.parametrize(
    ("image", "ours"),
    [
        ("gpuflow", True),
        ("gpuflow:0.1.0", True),
        ("registry.example.com:5000/team/gpuflow:0.1.0@sha256:ab", True),
        ("gpuflow-train:latest", False),
        ("python:3.11", False),
    ],
)
def test_the_chart_image_is_known_by_its_name(image: str, ours: bool) -> None:
    assert is_gpuflow_image(image) is ours


def test_the_chart_image_runs_the_venv_entrypoint_with_its_args(tmp_path: Path) -> None:
    container = {"image": "gpuflow:0.1.0", "args": ["operator", "run", "--identity=$(POD)"]}
    argv = command_line(container, {"POD": "op-1"}, tmp_path)
    assert argv == [str(VENV_BIN / "gpuflow"), "operator", "run", "--identity=op-1"]


def test_the_chart_image_workdir_is_the_checkout(tmp_path: Path) -> None:
    container = {"image": "gpuflow", "command": ["alembic", "-c", "/app/alembic.ini", "up"]}
    argv = command_line(container, {}, tmp_path)
    assert argv == [str(VENV_BIN / "alembic"), "-c", str(tmp_path / "alembic.ini"), "up"]


def test_another_image_without_command_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match=r"'python:3\.11'"):
        command_line({"image": "python:3.11", "args": ["x"]}, {}, tmp_path)
    # Another image's /app is not ours to rewrite.
    argv = command_line({"image": "other", "command": ["ls", "/app/x"]}, {}, tmp_path)
    assert argv == ["ls", "/app/x"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return process_env(
        pod(),
        container,
        lookup=lookup,
        pod_ip="10.0.0.5",
        mounts=Mounts(()),
        resolve=lambda ns, name: None,
        service_env={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"},
    )


def test_env_from_with_prefix_is_overridden_by_env() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "settings"}},
            {"secretRef": {"name": "db"}, "prefix": "DB_"},
            {"configMapRef": {"name": "absent", "optional": True}},
        ],
        "env": [{"name": "B", "value": "own"}, {"name": "C", "value": "$(A)$(DB_URL)"}],
    }
    env = env_of(container)
    assert (env["A"], env["B"], env["DB_URL"], env["C"]) == (
        "1",
        "own",
        "postgres://",
        "1postgres://",
    )
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("10.0.0.1", "6443")


def test_a_missing_env_from_source_is_a_config_error() -> None:
    with pytest.raises(EnvError, match='configmap "absent" not found'):
        env_of({"envFrom": [{"configMapRef": {"name": "absent"}}]})


ACCESS_VOLUME = {
    "name": "kube-api-access-x",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {
                "configMap": {
                    "name": "kube-root-ca.crt",
                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                }
            },
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ]
    },
}


def test_the_service_account_volume_is_written(tmp_path: Path) -> None:
    asked: list[tuple[str, str | None, int]] = []

    def token(p: dict[str, Any], audience: str | None, expiration_s: int) -> str:
        asked.append((p["metadata"]["uid"], audience, expiration_s))
        return "jwt"

    volumes = PodVolumes(
        tmp_path, tmp_path / "pod", pod(volumes=[ACCESS_VOLUME]), Projections(lookup, token)
    )
    folder = volumes.dirs["kube-api-access-x"]
    files = {f.name: f.read_text() for f in folder.iterdir()}
    assert files == {"token": "jwt", "ca.crt": "PEM", "namespace": "ns"}
    assert asked == [("u-1", None, 3607)]


def test_an_unreadable_projected_source_is_a_volume_error(tmp_path: Path) -> None:
    volume = {"name": "v", "projected": {"sources": [{"secret": {"name": "nope"}}]}}
    projections = Projections(lookup, lambda p, a, e: "jwt")
    with pytest.raises(VolumeError, match='secret "nope" not found'):
        PodVolumes(tmp_path, tmp_path / "pod", pod(volumes=[volume]), projections)


def test_a_service_url_is_routed_to_a_ready_pod_behind_it() -> None:
    endpoints = {("gf", "gpuflow-api", 80): ("10.0.0.7", 8000)}

    def resolve(ns: str, service: str, port: int) -> tuple[str, int] | None:
        return endpoints.get((ns, service, port))

    assert (
        rewrite_service_url("http://gpuflow-api.gf.svc:80/api/v1", resolve)
        == "http://10.0.0.7:8000/api/v1"
    )
    # No port: the scheme's; the cluster domain is optional.
    assert (
        rewrite_service_url("http://gpuflow-api.gf.svc.cluster.local", resolve)
        == "http://10.0.0.7:8000"
    )
    for unchanged in (
        "http://other.gf.svc/api",  # no ready pod behind it
        "http://example.com/api",
        "rank-0.job.gf.svc",  # a pod's name, not a URL: rewrite_dns's
    ):
        assert rewrite_service_url(unchanged, resolve) == unchanged
