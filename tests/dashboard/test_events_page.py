"""The Events page in headless Chromium: the cluster-wide stream shows a preemption
with the job that took the GPUs (linked), reached from the job's page, and filters by
kind and node. Local mode under SRTF (tests/dashboard/test_queue_timeline.py's
settings): a shorter job preempts a longer one."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit
from tests.dashboard.test_queue_timeline import DAY_S, TIMEOUT_S, settings

__all__ = ["settings"]
pytestmark = pytest.mark.slow


def test_the_event_stream_shows_a_preemption_with_its_preemptor_and_filters(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    long = submit(server, alice, name="long", num_gpus=8, duration_s=100 * DAY_S)
    waiting.wait_for(
        "long runs", lambda: job_status(server, alice, long["id"]) == "Running", TIMEOUT_S
    )
    short = submit(server, alice, name="short", num_gpus=8, duration_s=10 * DAY_S)
    waiting.wait_for(
        "short preempts long",
        lambda: job_status(server, alice, long["id"]) == "Preempted",
        TIMEOUT_S,
    )

    sign_in(watched, server, alice)
    page.goto(f"{server.url}/#/job/{long['id']}")
    page.get_by_role("link", name="This job in the cluster's event stream").click()
    expect(page.get_by_role("heading", name="Events")).to_be_visible()
    expect(page.get_by_label("Job id")).to_have_value(long["id"])
    rows = page.locator("#event-rows tr")
    expect(rows.first).to_have_attribute("data-kind", "preempted")  # newest first
    stop = page.locator('#event-rows tr[data-kind="preempted"]')
    expect(stop.locator(".preempted-by")).to_have_text(f"short ({short['id'][:8]})")
    expect(stop.locator(".reason")).to_contain_text("ShorterJobsFirst")
    expect(page.locator('#event-rows tr[data-kind="started"]')).to_contain_text(
        "node-0: GPU 0, 1, 2, 3; node-1: GPU 0, 1, 2, 3"
    )
    page.screenshot(path=ARTIFACTS / "events-preemption.png", full_page=True)

    # Every job's starts on node-1: both jobs'; then only preemptions: long's.
    page.get_by_label("Job id").fill("")
    page.get_by_label("Node").fill("node-1")
    page.get_by_label("Node").press("Enter")
    page.get_by_label("Kind").select_option("started")
    expect(rows).to_have_count(2)
    expect(page.locator("#event-rows")).to_contain_text("long (")
    expect(page.locator("#event-rows")).to_contain_text("short (")
    page.get_by_label("Node").fill("")
    page.get_by_label("Kind").select_option("preempted")
    expect(rows).to_have_count(1)
    stop.locator(".preempted-by").get_by_role("link").click()
    expect(page.get_by_role("heading", name="Job short")).to_be_visible()
    watched.assert_clean()
