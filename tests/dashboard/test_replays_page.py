"""The Replays page in headless Chromium: upload a trace, run a replay and a two-policy
sweep with their progress, the comparison's figures and charts, a result download."""

from __future__ import annotations

import csv
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from controller.traces import write_canonical
from controller.traces.formats.synthetic import generate
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, sign_in

pytestmark = pytest.mark.slow
JOBS = 30
REPLAY_TIMEOUT_MS = 120_000  # a replay of 30 jobs takes seconds; a loaded CI machine, more
CHARTS = ("Job completion time CDF", "GPU utilisation over time", "Queue length over time")


@pytest.fixture()
def trace_path(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    write_canonical(path, generate(JOBS, seed=5, cluster_gpus=8, load=0.8))
    return path


def test_a_replay_and_a_sweep_are_compared_and_downloaded(
    watched: Watched, server: LiveServer, trace_path: Path
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    sign_in(watched, server, alice)
    page.get_by_role("link", name="Replays").click()
    expect(page.get_by_role("heading", name="Replays", exact=True)).to_be_visible()

    page.get_by_label("Trace file").set_input_files(trace_path)
    page.get_by_role("button", name="Upload trace").click()
    expect(page.locator("#notice")).to_contain_text(f"Trace small uploaded: {JOBS} jobs")
    expect(page.get_by_label("Trace", exact=True)).to_contain_text("small (#")
    expect(page.get_by_label("Clusters")).to_have_value("2x4")  # the live cluster's name

    page.get_by_label("srtf", exact=True).focus()  # keyboard only: Space ticks, Enter submits
    page.keyboard.press("Space")
    expect(page.get_by_label("srtf", exact=True)).to_be_checked()
    page.get_by_role("button", name="Run", exact=True).click()
    progress = page.get_by_label("Progress")
    expect(page.locator("#run-state")).to_contain_text("succeeded", timeout=REPLAY_TIMEOUT_MS)
    expect(progress).to_have_js_property("value", 1)
    table = page.locator("#compare-table tbody tr")
    expect(table).to_have_count(1)
    expect(table.first.locator("th")).to_have_text("srtf")

    page.get_by_label("fifo", exact=True).check()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#run-state")).to_contain_text("Sweep")
    expect(page.locator("#run-state")).to_contain_text(
        "succeeded, 2 of 2 replays finished", timeout=REPLAY_TIMEOUT_MS
    )
    expect(progress).to_have_js_property("value", 1)
    expect(table).to_have_count(2)
    expect(page.locator("#compare-table tbody th")).to_have_text(["fifo", "srtf"])
    for title in CHARTS:
        figure = page.locator("figure.chart").filter(has_text=title)
        expect(figure.locator("canvas")).to_be_visible()
        expect(figure.locator(".u-legend")).to_contain_text("fifo")
        expect(figure.locator(".u-legend")).to_contain_text("srtf")
    fairness = page.locator("figure.chart").filter(has_text="Themis")
    expect(fairness.locator("canvas")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "replays.png", full_page=True)
    page.locator("#comparison").screenshot(path=ARTIFACTS / "replays-comparison.png")

    replay_id = table.first.get_attribute("data-replay")
    with page.expect_download() as downloading:
        page.get_by_role("button", name=f"Download jobs.csv of replay {replay_id}").click()
    download = downloading.value
    assert download.suggested_filename == f"replay-{replay_id}-jobs.csv"
    with open(download.path(), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == JOBS and "jct_s" in rows[0]
    r = httpx.get(f"{server.url}/api/v1/replays/{replay_id}/results", headers=alice)
    assert r.json()["headline"]["policy"] == "fifo"  # the row's label is its replay's policy
    watched.assert_clean()


def test_a_page_mounted_twice_at_once_lists_each_policy_once(
    watched: Watched, server: LiveServer
) -> None:
    """Two mounts before the first one's answers came (as signing in and a change of
    address can make): each fills its own policy box, the page shows one of each."""
    page = watched.page
    sign_in(watched, server, auth(server.app, "alice", "research"))
    page.evaluate("() => { location.hash = '#/replays'; location.hash = '#/replays?again'; }")
    expect(page.locator("#run-policies input[value=srtf]")).to_have_count(1)
    page.wait_for_load_state("networkidle")  # the first mount's answers too
    names = page.locator("#run-policies input").evaluate_all("els => els.map(e => e.value)")
    assert len(names) == len(set(names)) and "srtf" in names, names
    watched.assert_clean()
