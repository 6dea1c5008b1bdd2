"""The History page in headless Chromium against the API in local mode (conftest.py's
server: 2x4 GPUs, 100 x the wall clock, the service's sampler on, a sample every 30
simulated seconds): a 4-GPU job runs, a 6-GPU one waits; the page charts the cluster's
utilisation, allocation, queue, waits and memory and each tenant's GPUs, and a
node's GPUs when one is named; a user sees its own tenant only."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit

pytestmark = pytest.mark.slow
DAY_S = 86_400.0  # simulated: at time scale 100 nothing here finishes during the test


def test_the_history_page_charts_the_cluster_tenants_and_a_nodes_gpus(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    root = auth(server.app, "root", "ops", "admin")
    rosa = auth(server.app, "rosa", "red")
    bo = auth(server.app, "bo", "blue")
    running = submit(server, rosa, name="big", num_gpus=4, duration_s=DAY_S)
    submit(server, bo, name="wide", num_gpus=6, duration_s=DAY_S)
    waiting.wait_for("big runs", lambda: job_status(server, rosa, running["id"]) == "Running", 30)

    sign_in(watched, server, root)
    page.get_by_role("link", name="History").click()
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    # Samples every 0.3 wall seconds: the last bin has the running job and the waiting one.
    now = page.locator("#history-now")
    expect(now).to_contain_text("4.0 of 8 allocated")
    expect(now).to_contain_text("1.0 jobs waiting")
    cluster = page.locator("#history-cluster figure")
    expect(cluster).to_have_count(4)
    expect(cluster.first).to_have_attribute(
        "aria-label",
        _label_for("GPU utilisation and allocation", "% of GPUs", ["utilisation", "allocated"]),
    )
    tenants = page.locator("#history-tenants figure")
    expect(tenants).to_have_count(2)
    expect(tenants.first).to_have_attribute(
        "aria-label", _label_for("GPUs held", "GPUs", ["blue", "red"])
    )
    expect(page.locator("#history-health")).to_contain_text("Name a node above")

    page.get_by_label("Node").fill("node-0")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", name="Node node-0's GPUs")).to_be_visible()
    gpus = page.locator("#history-gpus figure")
    expect(gpus).to_have_count(2)  # utilisation and memory: local mode has no NVML figures
    expect(page.locator("#history-health")).to_contain_text("Every GPU healthy")
    page.get_by_label("Window").select_option(label="1 day")
    expect(now).to_contain_text("bins of 6m 0s")
    page.screenshot(path=ARTIFACTS / "history-page.png", full_page=True)

    # A user sees its own tenant's GPUs only.
    page.get_by_role("button", name="Sign out").click()
    sign_in(watched, server, bo)
    page.goto(f"{server.url}/#/history")
    expect(page.locator("#history-tenants figure").first).to_have_attribute(
        "aria-label", _label_for("GPUs held", "GPUs", ["blue"])
    )
    watched.assert_clean()


def _label_for(title: str, y: str, lines: list[str]) -> re.Pattern[str]:
    """charts.js comparisonChart's aria-label, whatever its point count."""
    named = f"{title}: {y} by time (simulated clock) for {', '.join(lines)}; "
    return re.compile("^" + re.escape(named) + r"\d+ points$")
