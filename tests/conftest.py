"""Fixtures for the whole suite: the session's one real control plane
(tests/controlplane/fixtures.py), shared by every package that asks for it."""

from tests.controlplane.fixtures import control_plane

__all__ = ["control_plane"]
