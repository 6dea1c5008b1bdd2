"""Choosing the job backend from the settings: `make_backend`, called by `create_app`.

Apart from api.backends so that the backends' shared types (api.backends) do not
import their implementations: api.cluster_mode.backend imports api.backends, and api.backends
imports nothing of api.cluster_mode.backend.
"""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from api.backends import JobBackend, LocalBackend
from api.local_mode.backend import LocalMode
from api.settings import Settings


def make_backend(
    settings: Settings, sessions: sessionmaker[Session], local: LocalMode | None
) -> JobBackend | None:
    """Cluster mode when a kubeconfig or in-cluster config is set; else local mode's
    LiveCluster when settings.live; else none (API-only)."""
    if settings.cluster_mode:
        from api.cluster_mode.backend import (
            ClusterModeBackend,  # the kubernetes client only when needed
        )

        return ClusterModeBackend(settings, sessions)
    return LocalBackend(local) if local is not None else None
