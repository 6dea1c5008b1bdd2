"""The dashboard in headless Chromium against the API in local mode (conftest.py):
sign in, the cluster heatmap with tenancy, the queue and why a job waits, a job's
page with its charts, its logs' note and Cancel, and the API docs served with no other host."""

from __future__ import annotations

import time

import httpx
import pytest
from playwright.sync_api import expect

from api.backends import LOCAL_LOGS_NOTE
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit

pytestmark = pytest.mark.slow
LONG_S = 10_000_000.0  # simulated seconds: runs for the whole test at time scale 100
LIVE_WITHIN_S = 2.0  # issue 14: a job submitted over REST shows within 2 s


def test_a_bad_token_is_refused_with_a_message(watched: Watched, server: LiveServer) -> None:
    watched.page.goto(server.url + "/")
    watched.page.get_by_label("API token").fill("gf_not-a-token")
    watched.page.get_by_role("button", name="Sign in").click()
    expect(watched.page.get_by_role("alert")).to_contain_text("refused that token")
    expect(watched.page.get_by_label("API token")).to_be_visible()
    # Chromium logs the refused request itself; nothing else may go wrong.
    watched.assert_clean(allowed=("status of 401",))


def test_cluster_queue_and_job_pages_follow_the_api(watched: Watched, server: LiveServer) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    root = auth(server.app, "root", "ops", "admin")
    theirs = submit(server, root, name="ops-job", num_gpus=4, duration_s=LONG_S)
    mine = submit(server, alice, name="alice-job", num_gpus=4, duration_s=LONG_S)
    jobs = (theirs, mine)
    waiting.wait_for(
        "both jobs to run",
        lambda: all(job_status(server, root, j["id"]) == "Running" for j in jobs),
    )

    sign_in(watched, server, alice)
    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    expect(page.locator("#racks .gpu")).to_have_count(8)
    expect(page.locator('#racks .gpu[data-state="mine"]')).to_have_count(4)
    expect(page.locator('#racks .gpu[data-state="other"]')).to_have_count(4)
    assert theirs["id"][:8] not in page.content()  # another tenant's job: occupied, no id
    first = page.locator('#racks .gpu[data-state="mine"]').first
    first.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#gpu-detail")).to_contain_text(mine["id"][:8])
    page.screenshot(path=ARTIFACTS / "cluster.png")

    page.get_by_role("link", name="Queue").click()
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    started = time.monotonic()
    waits = submit(server, alice, name="waits", num_gpus=2, duration_s=LONG_S)
    row = page.locator(f'tr[data-job="{waits["id"]}"]')
    expect(row).to_be_visible()
    assert time.monotonic() - started <= LIVE_WITHIN_S
    expect(row.locator(".reason")).to_contain_text("InsufficientGpus")
    page.get_by_label("Filter").fill("no-such-job")
    expect(row).to_have_count(0)
    page.get_by_label("Filter").fill("waits")
    expect(row).to_be_visible()
    page.screenshot(path=ARTIFACTS / "queue.png")

    row.get_by_role("link").click()
    expect(page.get_by_role("heading", name="Job waits")).to_be_visible()
    expect(page.locator('[data-field="why it waits"]')).to_contain_text("InsufficientGpus")
    expect(page.locator("#job-events")).to_contain_text("submitted")
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator('[data-field="status"]')).to_have_text("Cancelled")
    expect(page.get_by_role("button", name="Cancel job")).to_be_disabled()
    assert job_status(server, alice, waits["id"]) == "Cancelled"
    watched.assert_clean()


def test_a_job_page_charts_its_reported_metrics(watched: Watched, server: LiveServer) -> None:
    alice = auth(server.app, "alice", "research")
    job = submit(server, alice, name="reports", num_gpus=1, duration_s=LONG_S)
    names = ("samples_per_s", "loss", "batch_size")
    metrics = [
        {"name": n, "value": v * (step + 1), "step": step}
        for step in range(20)
        for n, v in zip(names, (100.0, 0.1, 32.0), strict=True)
    ]
    r = httpx.post(
        f"{server.url}/api/v1/jobs/{job['id']}/metrics",
        json={"metrics": metrics},
        headers={"X-Job-Token": job["metrics_token"]},
    )
    assert r.status_code == 201, r.text
    sign_in(watched, server, alice)
    watched.page.goto(f"{server.url}/#/job/{job['id']}")
    charts = watched.page.locator("figure.chart")
    expect(charts).to_have_count(3)
    expect(charts.first.locator("canvas")).to_be_visible()
    expect(charts.nth(1)).to_have_attribute("aria-label", "Loss by step, 20 reports")
    # Local mode runs no worker process: the logs section says so.
    expect(watched.page.locator("#job-logs-note")).to_have_text(LOCAL_LOGS_NOTE)
    watched.page.screenshot(path=ARTIFACTS / "job.png")
    watched.assert_clean()


def test_a_job_page_shows_its_deadline_beside_its_predicted_finish(
    watched: Watched, server: LiveServer
) -> None:
    alice = auth(server.app, "alice", "research")
    # Alone on the cluster: it finishes after its 1e4 s, within its 2e4 s (5h 33m 20s).
    job = submit(server, alice, name="due", num_gpus=8, duration_s=1e4, deadline_s=2e4)
    waiting.wait_for("it to run", lambda: job_status(server, alice, job["id"]) == "Running")
    sign_in(watched, server, alice)
    watched.page.goto(f"{server.url}/#/job/{job['id']}")
    expect(watched.page.locator('[data-field="deadline"]')).to_contain_text(
        "5h 33m after submission"
    )
    predicted = watched.page.locator('[data-field="predicted finish"]')
    expect(predicted).to_contain_text("after submission")
    expect(predicted).to_contain_text(": on track")
    watched.assert_clean()


@pytest.mark.parametrize(("path", "rendered"), [("/docs", ".swagger-ui .info"), ("/redoc", "h1")])
def test_api_docs_render_from_the_server_alone(
    watched: Watched, server: LiveServer, path: str, rendered: str
) -> None:
    watched.page.goto(server.url + path)
    expect(watched.page.locator(rendered).first).to_contain_text("gpuflow")
    watched.page.wait_for_load_state("networkidle")
    watched.assert_clean()
