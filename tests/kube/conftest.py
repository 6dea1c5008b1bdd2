"""Fixtures for the test API server's own tests."""

from __future__ import annotations

from tests.kube.fixtures import kube_server

__all__ = ["kube_server"]
