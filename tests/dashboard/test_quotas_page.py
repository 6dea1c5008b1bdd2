"""The Quotas page in headless Chromium against the API in local mode (conftest.py's
server, 2x4 GPUs): an admin builds a quota tree with the editor, refusals land on the
field they name (or name the other quota at fault), each quota's row and bar follow
its tenants' jobs, rows are kept across polls (keyed DOM), the chart draws each leaf
against its guarantee, and a user sees the figures without the editor."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit

pytestmark = pytest.mark.slow
DAY_S = 86_400.0  # simulated: at time scale 100 nothing here finishes during the test


def _fill(page: Page, **fields: str) -> None:
    for name in ("name", "guarantee", "limit", "weight", "tenants"):
        page.locator(f"#quota-{name}").fill(fields.get(name, "1" if name == "weight" else ""))
    page.locator("#quota-parent").select_option(fields.get("parent", ""))
    page.get_by_role("button", name="Save quota").click()


def test_an_admin_edits_the_tree_and_watches_the_shares(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    root = auth(server.app, "root", "ops", "admin")
    sign_in(watched, server, root)
    page.get_by_role("link", name="Quotas").click()
    expect(page.get_by_role("heading", name="Quotas")).to_be_visible()
    rows = page.locator("#quotas-rows tr")
    _fill(page, name="research", guarantee="8")
    expect(rows).to_have_count(1)
    _fill(page, name="team-a", parent="research", guarantee="4", tenants="vision")
    expect(rows).to_have_count(2)
    _fill(page, name="team-b", parent="research", guarantee="3", limit="6", weight="2")
    expect(rows).to_have_count(3)
    # Parents before children, siblings by name.
    order = ["research", "team-a", "team-b"]
    assert [rows.nth(i).get_attribute("data-quota") for i in range(3)] == order
    # A limit below the guarantee: refused on the limit field.
    _fill(page, name="team-c", parent="research", guarantee="1", limit="0")
    expect(page.locator("#quota-limit")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#quota-limit-error")).to_contain_text("below")
    # Children over their parent's guarantee: the other quota's field is named.
    _fill(page, name="team-c", parent="research", guarantee="5")
    expect(page.locator("#quota-form-error")).to_contain_text("quota research, guarantee")
    expect(page.locator("#quota-form-error")).to_contain_text("add up to 12")
    expect(page.locator("#quota-limit")).not_to_have_attribute("aria-invalid", "true")
    # GPUs per model that are no number: refused on the guarantee field.
    _fill(page, name="team-c", parent="research", guarantee="A100=lots")
    expect(page.locator("#quota-guarantee")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#quota-form-error")).to_have_text("Refused: see the fields marked.")
    # A bad name: refused on the name field; nothing was created.
    _fill(page, name="Team_C", parent="research", guarantee="1")
    expect(page.locator("#quota-name")).to_have_attribute("aria-invalid", "true")
    expect(rows).to_have_count(3)

    # vision (team-a) takes 6 of the 8 GPUs, 2 of them borrowed; team-b's job waits.
    vic = auth(server.app, "vic", "vision")
    bob = auth(server.app, "bob", "team-b")
    first = submit(server, vic, name="big", num_gpus=6, duration_s=DAY_S)
    waiting.wait_for("big to run", lambda: job_status(server, vic, first["id"]) == "Running")
    submit(server, bob, name="waits", num_gpus=4, duration_s=DAY_S)
    a = page.locator('#quotas-rows tr[data-quota="team-a"]')
    expect(a.locator(".quota-bar")).to_have_attribute(
        "aria-label", "team-a: 6 GPUs held, guarantee 4, no limit, 2 borrowed"
    )
    expect(a.locator("td").nth(5)).to_have_text("2")  # Borrowed
    b = page.locator('#quotas-rows tr[data-quota="team-b"]')
    expect(b.locator("td").nth(6)).to_contain_text(" 1")  # one waiting, by its reason
    expect(page.locator("#quotas-fairness")).to_contain_text(": 0.500.")  # 1.5 and 0
    # Kept across polls: the row element is the same one a later poll updates.
    page.evaluate("document.querySelector('tr[data-quota=\"team-a\"]').probe = 1")
    stamp = page.locator("#status").inner_text()
    expect(page.locator("#status")).not_to_have_text(stamp)
    assert page.evaluate("document.querySelector('tr[data-quota=\"team-a\"]').probe") == 1
    # The chart: each leaf's GPUs and its guarantee, named in uPlot's legend.
    legend = page.locator("#quotas-chart .u-legend")
    for label in ("team-a GPUs", "team-a guarantee", "team-b GPUs", "team-b guarantee"):
        expect(legend).to_contain_text(label)
    # Edit loads a quota's spec; delete removes it.
    b.get_by_role("button", name="Edit quota team-b").click()
    expect(page.locator("#quota-limit")).to_have_value("6")
    expect(page.locator("#quota-weight")).to_have_value("2")
    page.get_by_role("button", name="Delete quota").click()
    expect(rows).to_have_count(2)
    page.screenshot(path=ARTIFACTS / "quotas.png", full_page=True)
    watched.assert_clean(allowed=("422",))


def test_a_user_sees_the_figures_without_the_editor(watched: Watched, server: LiveServer) -> None:
    page = watched.page
    root = auth(server.app, "root", "ops", "admin")
    for name in ("team-a", "team-b"):
        r = httpx.put(f"{server.url}/api/v1/quotas/{name}", json={"guarantee": 4}, headers=root)
        assert r.status_code == 201, r.text
    ann = auth(server.app, "ann", "team-a")
    sign_in(watched, server, ann)
    page.get_by_role("link", name="Quotas").click()
    expect(page.locator("#quotas-rows tr")).to_have_count(2)
    expect(page.locator("#quota-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Edit quota team-a")).to_have_count(0)
    watched.assert_clean()
