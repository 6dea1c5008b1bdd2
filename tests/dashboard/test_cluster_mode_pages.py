"""The dashboard in cluster mode, in headless Chromium: the Cluster, Job, What-if,
Admin and Events pages against the session's real control plane with the real operator (no
kubelet: the job the operator admits keeps its GPUs, the others wait).

Times are wall-clock dates labelled so, never the Unix time read as a simulated
clock; the policy and options the operator runs show from its first round; what-if
predicts a contended queue differently under FIFO and SRTF; the event stream shows a
preemption with its preemptor.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from api.cluster_mode.backend import ClusterModeBackend
from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.api.test_cluster_mode import _settings
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, sign_in, submit
from tests.operators.harness import running_operator
from tests.operators.real_cluster import RealCluster

pytestmark = pytest.mark.slow
WALL = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"  # common.js instant() in cluster mode
WHATIF_TIMEOUT_MS = 60_000  # one simulation per policy on a loaded machine
DURATION = re.compile(r"^(\d+h \d+m|\d+m \d+s|\d+s)$")


@pytest.fixture
def settings(tmp_path: Path, kube_cluster: RealCluster) -> Settings:
    """Cluster mode (overrides conftest's local mode): the API follows the control plane."""
    kube_cluster.add_node("node-0")  # one DGX-1: 8 GPUs
    return _settings(tmp_path, kube_cluster)


def _status(server: LiveServer, headers: dict[str, str], job_id: str) -> str:
    r = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    status: str = r.json()["status"]
    return status


def _seconds(text: str) -> float:
    """A duration as common.js duration() writes it."""
    h = re.search(r"(\d+)h", text)
    m = re.search(r"(\d+)m", text)
    s = re.search(r"(\d+)s", text)
    return sum(float(x.group(1)) * k for x, k in ((h, 3600), (m, 60), (s, 1)) if x)


def test_cluster_mode_pages_show_wall_clock_times_the_running_policy_and_what_if(
    watched: Watched, server: LiveServer, kube_cluster: RealCluster
) -> None:
    page = watched.page
    backend = server.app.state.backend
    assert isinstance(backend, ClusterModeBackend)
    waiting.wait_for("the follower", backend.follower.caught_up, timeout_s=30)
    root = auth(server.app, "root", "ops", "admin")
    options: Any = (("gandiva", "quantum_s", 30),)
    with running_operator(kube_cluster.client, policy="gandiva", policy_options=options):
        runs = submit(server, root, name="runs", num_gpus=8, duration_s=600.0)
        waiting.wait_for(
            "the first job admitted",
            lambda: _status(server, root, runs["id"]) in ("Admitted", "Running"),
            timeout_s=60,
        )
        # Submitted in this order: FIFO runs `long` next, SRTF `short`.
        long = submit(server, root, name="long", num_gpus=8, duration_s=6000.0)
        short = submit(server, root, name="short", num_gpus=8, duration_s=60.0)

        sign_in(watched, server, root)
        # Cluster: the operator's policy with its options, and the wall clock.
        summary = page.locator("#summary")
        expect(summary.locator("dd").first).to_have_text("gandiva (quantum_s=30)")
        expect(summary.locator("dd").last).to_have_text(re.compile(rf"^{WALL} \(wall clock\)$"))
        page.screenshot(path=ARTIFACTS / "cluster-mode-cluster.png", full_page=True)

        # Job: events and the timeline on the wall clock.
        page.goto(f"{server.url}/#/job/{runs['id']}")
        expect(page.get_by_role("columnheader", name="Time (wall clock)")).to_be_visible()
        expect(page.locator("#job-events tr td:nth-child(2)").first).to_have_text(
            re.compile(rf"^{WALL}$")
        )
        expect(page.locator("#timeline-rows tr td:nth-child(2)").first).to_have_text(
            re.compile(rf"^{WALL}$")
        )
        expect(page.get_by_role("heading", name="States over time (wall clock)")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "cluster-mode-job.png", full_page=True)

        # What if: FIFO and SRTF differ on the contended queue.
        page.get_by_role("link", name="What if").click()
        state = page.locator("#whatif-state")
        expect(state).to_contain_text("Computed at", timeout=WHATIF_TIMEOUT_MS)
        for box in page.locator("#whatif-policies input[type=checkbox]").all():
            if box.get_attribute("value") not in ("fifo", "srtf"):  # every other registered one
                box.uncheck()
        page.get_by_role("button", name="Recompute").click()
        expect(page.locator("#whatif-policies tbody tr")).to_have_count(
            2, timeout=WHATIF_TIMEOUT_MS
        )
        expect(state).to_contain_text(re.compile(rf"{WALL}, wall clock; active policy gandiva"))
        cells: dict[str, dict[str, str]] = {}
        for job in (long, short):
            row = page.locator(f'#whatif-jobs tr[data-job="{job["id"]}"]')
            cells[job["name"]] = {
                p: row.locator(f'td[data-policy="{p}"]').inner_text() for p in ("fifo", "srtf")
            }
        for job_cells in cells.values():
            assert all(DURATION.match(v) for v in job_cells.values()), cells
        # SRTF runs `short` right after `runs`; FIFO after `long` too.
        assert _seconds(cells["short"]["srtf"]) < 1000 < _seconds(cells["short"]["fifo"]), cells
        page.screenshot(path=ARTIFACTS / "cluster-mode-whatif.png", full_page=True)

        # Admin: the policy the operator runs, before any admin chose one.
        page.get_by_role("link", name="Admin").click()
        expect(page.locator("#policy-active")).to_have_text("gandiva (quantum_s=30)")
    watched.assert_clean()


def test_cluster_mode_events_show_a_preemption_with_its_preemptor(
    watched: Watched, server: LiveServer, kube_cluster: RealCluster
) -> None:
    """SRTF preempts the admitted long job for a short one; the follower records the
    stop with the operator's status.preemptedBy, and the Events page names it."""
    page = watched.page
    backend = server.app.state.backend
    assert isinstance(backend, ClusterModeBackend)
    waiting.wait_for("the follower", backend.follower.caught_up, timeout_s=30)
    alice = auth(server.app, "alice", "vision")
    with running_operator(kube_cluster.client, policy="srtf"):
        long = submit(server, alice, name="long", num_gpus=8, duration_s=6000.0)
        waiting.wait_for(
            "long admitted", lambda: _status(server, alice, long["id"]) == "Admitted", timeout_s=60
        )
        short = submit(server, alice, name="short", num_gpus=8, duration_s=60.0)
        waiting.wait_for(
            "long preempted",
            lambda: _status(server, alice, long["id"]) == "Preempted",
            timeout_s=60,
        )
        sign_in(watched, server, alice)
        page.get_by_role("link", name="Events").click()
        page.get_by_label("Kind").select_option("preempted")
        stop = page.locator('#event-rows tr[data-kind="preempted"]')
        expect(stop).to_have_count(1)
        expect(stop.locator("td").first).to_have_text(re.compile(rf"^{WALL}$"))
        expect(stop.locator(".preempted-by")).to_have_text(f"short ({short['id'][:8]})")
        expect(stop.get_by_role("link").first).to_have_text(f"long ({long['id'][:8]})")
        page.screenshot(path=ARTIFACTS / "cluster-mode-events.png", full_page=True)
    watched.assert_clean()
