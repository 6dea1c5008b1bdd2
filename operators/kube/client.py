"""The kubernetes client's ApiClient, from a kubeconfig or the pod's service account.

Called where a process starts talking to Kubernetes: the operator's and the node
agent's commands, the API service's cluster mode (api.cluster_mode.backend.ClusterModeBackend),
which wrap the client in operators.kube.KubeApi. A configuration that cannot be loaded is a
`KubeConfigError` with a one-line message.

In a pod the service account's files are at SERVICE_ACCOUNT_DIR, the path every
kubelet mounts them at. A process that plays a pod without its own mount namespace
(the sandbox's process kubelet, gpuflow/sandbox/kubelet/__init__.py) has them elsewhere and
names that folder in $GPUFLOW_SERVICE_ACCOUNT_DIR; the API server's address comes
from KUBERNETES_SERVICE_HOST and _PORT either way, as in any pod.
"""

from __future__ import annotations

import os
from typing import Any

import kubernetes  # type: ignore[import-untyped]
from kubernetes.config.incluster_config import (  # type: ignore[import-untyped]
    InClusterConfigLoader,
)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_DIR_ENV = "GPUFLOW_SERVICE_ACCOUNT_DIR"  # overrides SERVICE_ACCOUNT_DIR


class KubeConfigError(ValueError):
    """No usable kubeconfig (or in-cluster service account): a one-line message."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from a kubeconfig file, else from the pod's service account.
    Raises KubeConfigError when neither gives a configuration."""
    config = kubernetes.client.Configuration()
    # One connection per parallel writer and per watch (operators/writer.py WRITERS).
    config.connection_pool_maxsize = 32
    if kubeconfig is None:
        try:
            directory = os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR
            loader = InClusterConfigLoader(f"{directory}/token", f"{directory}/ca.crt")
            loader.load_and_set(config)
            return kubernetes.client.ApiClient(config)
        except kubernetes.config.ConfigException:
            pass
    try:
        kubernetes.config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=config
        )
    except (kubernetes.config.ConfigException, OSError) as exc:
        where = kubeconfig or "~/.kube/config (no in-cluster service account either)"
        raise KubeConfigError(f"kubeconfig {where}: {exc}") from None
    return kubernetes.client.ApiClient(config)
