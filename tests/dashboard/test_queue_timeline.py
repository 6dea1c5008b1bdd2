"""The Queue page in the policy's order and the Job page's timeline, in headless
Chromium against the API in local mode under SRTF (conftest.py's server, with the
policy set here): positions from GET /order, tenant and status filters, and a
preempted job's timeline naming the job that took its GPUs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit
from tests.postgres import truncate_all

pytestmark = pytest.mark.slow
TIMEOUT_S = 60.0  # a slow, loaded CI machine; every wait ends as soon as it holds
DAY_S = 86_400.0  # simulated: at time scale 100 nothing here finishes during the test


@pytest.fixture()
def settings(dashboard_db: str, tmp_path: Path) -> Iterator[Settings]:
    """conftest.py's settings, under SRTF."""
    settings = Settings(
        database_url=dashboard_db,
        data_dir=tmp_path,
        cluster="2x4",
        policy="srtf",
        time_scale=100.0,
        round_interval_s=0.0,
        sync_interval_s=0.05,
    )
    yield settings
    truncate_all(settings)


def _wait_status(server: LiveServer, headers: dict[str, str], job_id: str, want: str) -> None:
    waiting.wait_for(
        f"job {job_id} {want}", lambda: job_status(server, headers, job_id) == want, TIMEOUT_S
    )


def test_queue_in_srtf_order_and_a_timeline_naming_the_preemptor(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    bob = auth(server.app, "bob", "vision")
    # 2x4 GPUs and every job takes all 8: one runs, SRTF orders the others.
    long = submit(server, alice, name="long", num_gpus=8, duration_s=100 * DAY_S)
    _wait_status(server, alice, long["id"], "Running")
    short = submit(server, alice, name="short", num_gpus=8, duration_s=10 * DAY_S)
    _wait_status(server, alice, long["id"], "Preempted")
    mid = submit(server, alice, name="mid", num_gpus=8, duration_s=50 * DAY_S)
    submit(server, bob, name="bobs", num_gpus=8, duration_s=30 * DAY_S)

    sign_in(watched, server, alice)
    page.get_by_role("link", name="Queue").click()
    rows = page.locator("#queue-rows tr")
    # Remaining time: bob's (30 days, counted, not shown) 1, mid (50) 2, long (100) 3.
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-job", mid["id"])
    expect(rows.nth(0).locator("td").first).to_have_text("2")
    expect(rows.nth(1)).to_have_attribute("data-job", long["id"])
    expect(rows.nth(1).locator("td").first).to_have_text("3")
    expect(page.locator("#queue-caption")).to_contain_text("1 of them other tenants' jobs")
    expect(page.locator("#queue-caption")).to_contain_text("srtf")
    assert "bobs" not in page.locator("#queue-rows").inner_text()
    page.get_by_label("Status").select_option("Preempted")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job", long["id"])
    expect(rows.first.locator(".reason")).to_contain_text("ShorterJobsFirst")
    page.get_by_label("Status").select_option("")
    page.get_by_label("Tenant").select_option("research")
    expect(rows).to_have_count(2)
    page.screenshot(path=ARTIFACTS / "queue-policy-order.png")

    rows.nth(1).get_by_role("link").click()
    expect(page.get_by_role("heading", name="Job long")).to_be_visible()
    expect(page.locator('[data-field="position in queue"]')).to_have_text("3")
    stopped = page.locator('#timeline-rows tr[data-state="Preempted"]')
    expect(stopped).to_have_count(1)
    expect(stopped.locator(".preempted-by")).to_have_text(f"short ({short['id'][:8]})")
    expect(stopped.locator(".reason")).to_contain_text("ShorterJobsFirst")
    expect(page.locator('#timeline-rows tr[data-state="Running"]')).to_have_count(1)
    expect(page.locator("figure.timeline canvas").first).to_be_visible()
    label = re.compile(r"^States over time: Queued from .*, Running from .*, Preempted from ")
    expect(page.locator("figure.timeline")).to_have_attribute("aria-label", label)
    expect(page.locator("#allocation-rows")).to_contain_text("node-0: GPU 0, 1, 2, 3")
    expect(page.locator("#allocation-rows")).to_contain_text("node-1: GPU 0, 1, 2, 3")
    page.screenshot(path=ARTIFACTS / "job-timeline.png", full_page=True)
    stopped.locator(".preempted-by").get_by_role("link").click()
    expect(page.get_by_role("heading", name="Job short")).to_be_visible()
    expect(page.locator('[data-field="status"]')).to_have_text("Running")
    expect(page.locator("#allocation-rows tr")).to_have_count(1)
    watched.assert_clean()
