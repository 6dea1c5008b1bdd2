"""GET /nodes's answers kept while the cluster stays as it was: one JSON body per viewer.

api.routes.cluster's `list_nodes` asks the backend for its `nodes_version` first and
answers a viewer again what it answered at that version; a new version drops every
body kept. At 1,000 nodes x 8 GPUs an answer is ~1.3 MB of JSON that costs ~0.3-0.5 s
of server time to build, name (api.jobs.redaction) and serialise, and the Cluster page
asks for it every second, while local mode's nodes change only when a round starts or
stops a job, a restart's overhead ends or an admin cordons a node.

A viewer is an admin (who sees every job) or a tenant (who sees its own jobs named and
the others counted): redaction depends on nothing else, and a job's name and tenant
never change once stored, so a body kept for a viewer at a version is the body that
viewer would get built afresh. One instance per app (`create_app`, app.state).
"""

from __future__ import annotations

import threading

from api.store.models import User

# (is admin, tenant): the tenant only matters to a non-admin.
Viewer = tuple[bool, str | None]


def viewer_of(user: User) -> Viewer:
    admin = user.role == "admin"
    return (True, None) if admin else (False, user.tenant)


class NodesAnswers:
    """The JSON bodies of GET /nodes at the latest version seen, by viewer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: int | None = None
        self._bodies: dict[Viewer, bytes] = {}

    def get(self, version: int | None, viewer: Viewer) -> bytes | None:
        """The body kept for `viewer` at `version`; None if none (or version None)."""
        with self._lock:
            if version is None or version != self._version:
                return None
            return self._bodies.get(viewer)

    def put(self, version: int | None, viewer: Viewer, body: bytes) -> None:
        """Keep `body` for `viewer` at `version` (None: not kept); a version other than
        the one kept drops the bodies kept before. A body built from an older state
        than the one kept (a slow request overtaken) is not kept."""
        if version is None:
            return
        with self._lock:
            if self._version is not None and version < self._version:
                return
            if version != self._version:
                self._version, self._bodies = version, {}
            self._bodies[viewer] = body
