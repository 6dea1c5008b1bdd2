"""The Job page's worker logs in cluster mode, in headless Chromium: on the session's
real control plane with the real operator and a node whose kubelet runs the worker as
a process and serves its log (RealCluster.add_process_node), the page shows the lines
the worker printed, through GET /api/v1/jobs/{id}/logs and the API server's proxy to
the kubelet. (test_cluster_mode_pages.py holds the other cluster-mode pages, on a node
without a kubelet.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from api.cluster_mode.backend import ClusterModeBackend
from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.api.test_cluster_mode import _settings
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit
from tests.operators.harness import running_operator
from tests.operators.real_cluster import RealCluster

pytestmark = pytest.mark.slow
# Prints its progress, then keeps the node's GPUs while the page is looked at.
WORKER = (
    "import time\nfor i in range(3):\n    print(f'epoch {i}: loss {1.0 / (i + 1):.3f}', flush=True)"
    "\ntime.sleep(120)"
)


@pytest.fixture
def settings(tmp_path: Path, kube_cluster: RealCluster) -> Settings:
    """Cluster mode (overrides conftest's local mode) with one DGX-1 that runs its pods."""
    kube_cluster.add_process_node("node-0", tmp_path / "sandbox")
    return _settings(tmp_path, kube_cluster)


def test_cluster_mode_job_page_shows_the_workers_log(
    watched: Watched, server: LiveServer, kube_cluster: RealCluster
) -> None:
    page = watched.page
    backend = server.app.state.backend
    assert isinstance(backend, ClusterModeBackend)
    waiting.wait_for("the follower", backend.follower.caught_up, timeout_s=30)
    alice = auth(server.app, "alice", "vision")
    with running_operator(kube_cluster.client):
        job = submit(server, alice, name="trains", num_gpus=8, command=["python", "-c", WORKER])
        waiting.wait_for(
            "the job running",
            lambda: job_status(server, alice, job["id"]) == "Running",
            timeout_s=60,
        )
        sign_in(watched, server, alice)
        page.goto(f"{server.url}/#/job/{job['id']}")
        expect(page.get_by_role("heading", name="Worker logs")).to_be_visible()
        logs = page.get_by_label("Worker logs")
        expect(logs).to_have_text(
            "epoch 0: loss 1.000\nepoch 1: loss 0.500\nepoch 2: loss 0.333", timeout=30_000
        )
        expect(page.locator("#job-logs-source")).to_have_text(
            re.compile(r"^Pod trains-\S+-0 on node-0 \(Running\)$")
        )
        expect(page.locator("#job-logs-note")).to_have_text("")
        page.get_by_label("Last lines").select_option("50")
        expect(logs).to_contain_text("epoch 2: loss 0.333")
        page.screenshot(path=ARTIFACTS / "cluster-mode-job-logs.png", full_page=True)
    watched.assert_clean()
