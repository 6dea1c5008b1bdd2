"""Fixtures for the chart's tests: a real helm (installed by .ci/install-helm.sh) and
renders of helm/gpuflow with given values, parsed into manifests. The real control
plane the install, kubectl and dry-run tests use is the session's one (tests/conftest.py:
`control_plane`, and `kube_cluster` where a test needs the CRDs and a reset)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from tests.helm.chart import ROOT, Helm, Manifests

INSTALL_SCRIPT = ROOT / ".ci" / "install-helm.sh"


@pytest.fixture(scope="session")
def helm() -> Helm:
    """helm 3.17 from .ci/install-helm.sh; skipped where it cannot be installed, except
    in CI (CI set), where that is a failure."""
    try:
        result = subprocess.run(
            [str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        result = subprocess.CompletedProcess([str(INSTALL_SCRIPT)], 1, "", str(exc))
    if result.returncode != 0:
        message = f"helm could not be installed: {result.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return Helm(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., Manifests]:
    """render(**values) -> the chart's manifests, CRDs included (cached per values)."""
    cache: dict[str, Manifests] = {}

    def _render(**values: object) -> Manifests:
        key = repr(sorted(values.items()))
        if key not in cache:
            cache[key] = helm.template(values)
        return cache[key]

    return _render
