"""The `kube_server` pytest fixture, importable by any test package.

Use it from another package's conftest.py:

    from tests.kube.fixtures import kube_server  # noqa: F401  (re-exported fixture)

Each test gets a fresh server on 127.0.0.1 and an ephemeral port; it is stopped (and
its API clients closed) after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuflow.sandbox.kube.apiserver import KubeServer, ServerOptions

__all__ = ["KubeServer", "ServerOptions", "kube_server"]


@pytest.fixture
def kube_server() -> Iterator[KubeServer]:
    with KubeServer() as server:
        yield server
