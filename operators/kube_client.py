"""The kubernetes client's ApiClient, from a kubeconfig or the pod's service account.

Called where a process starts talking to Kubernetes: the operator's and the node
agent's commands, the API service's cluster mode (api.cluster.ClusterModeBackend), which wrap
the client in operators.kube.KubeApi. A configuration that cannot be loaded is a
`KubeConfigError` with a one-line message.
"""

from __future__ import annotations

from typing import Any

import kubernetes  # type: ignore[import-untyped]


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
            kubernetes.config.load_incluster_config(client_configuration=config)
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
