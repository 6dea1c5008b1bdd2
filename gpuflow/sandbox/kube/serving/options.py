"""How a test Kubernetes API server is configured: `ServerOptions`.

Given to `KubeServer` (apiserver.py, which also exports it) by tests, the sandbox and
the operator benchmark; read by the store it makes and by the handler's watches.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerOptions:
    """The test server's knobs; the defaults are a real server's where one applies."""

    history_limit: int = 10_000  # watch events retained (at least); older RVs get 410
    watch_timeout_s: float = 1800.0  # the real server's --min-request-timeout
    bookmark_interval_s: float = 1.0  # real servers send one about a minute; tests are short
    graceful_pods: bool = False  # see store.Store.graceful_pods
