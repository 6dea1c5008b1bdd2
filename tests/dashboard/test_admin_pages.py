"""The What-if and Admin pages in headless Chromium: predictions under two policies, an
admin's policy switch after its preview and a drain whose job restarts elsewhere,
and a user who gets no admin controls and 403s from the API."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import (
    ARTIFACTS,
    LiveServer,
    Watched,
    job_status,
    sign_in,
    submit,
)

pytestmark = pytest.mark.slow
LONG_S = 10_000_000.0  # simulated seconds: runs for the whole test at time scale 100
WHATIF_TIMEOUT_MS = 60_000  # one simulation per policy on a loaded machine
PREDICTED = re.compile(r"^(\d+h \d+m|\d+m \d+s|\d+s)$")  # a duration, not "—"


def _job(server: LiveServer, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _running(server: LiveServer, headers: dict[str, str], job_id: str) -> None:
    waiting.wait_for(
        f"job {job_id} to run", lambda: job_status(server, headers, job_id) == "Running"
    )


def test_what_if_predicts_each_job_under_two_policies(watched: Watched, server: LiveServer) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    root = auth(server.app, "root", "ops", "admin")
    theirs = submit(server, root, name="ops-job", num_gpus=4, duration_s=7200.0)
    runs = submit(server, alice, name="runs", num_gpus=4, duration_s=3600.0)
    waits = submit(server, alice, name="waits", num_gpus=8, duration_s=3600.0)
    _running(server, alice, runs["id"])

    sign_in(watched, server, alice)
    page.get_by_role("link", name="What if").click()
    expect(page.get_by_role("heading", name="What if")).to_be_visible()
    state = page.locator("#whatif-state")
    expect(state).to_contain_text("Computed at", timeout=WHATIF_TIMEOUT_MS)  # every policy
    for box in page.locator("#whatif-policies input[type=checkbox]").all():
        if box.get_attribute("value") not in ("fifo", "srtf"):  # every other registered one
            box.uncheck()
    page.get_by_role("button", name="Recompute").click()
    expect(page.locator("#whatif-policies tbody tr")).to_have_count(2, timeout=WHATIF_TIMEOUT_MS)
    expect(page.locator("#whatif-policies tbody th")).to_have_text(["fifo (active)", "srtf"])
    headings = page.locator("#whatif-jobs thead th")
    expect(headings).to_contain_text(["Finishes in: fifo (active)", "Finishes in: srtf"])
    for job in (runs, waits):
        row = page.locator(f'#whatif-jobs tr[data-job="{job["id"]}"]')
        for policy in ("fifo", "srtf"):
            expect(row.locator(f'td[data-policy="{policy}"]')).to_have_text(PREDICTED)
    expect(page.locator(f'tr[data-job="{theirs["id"]}"]')).to_have_count(0)
    expect(page.locator("#whatif-jobs caption")).to_contain_text("1 other tenant's job is")
    page.screenshot(path=ARTIFACTS / "whatif.png", full_page=True)
    watched.assert_clean()


def test_an_admin_previews_and_switches_the_policy_and_drains_a_node(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    root = auth(server.app, "root", "ops", "admin")
    job = submit(server, alice, name="moves", num_gpus=4, duration_s=LONG_S)
    _running(server, root, job["id"])
    first_node = _job(server, root, job["id"])["nodes"]
    assert first_node and "," not in first_node

    sign_in(watched, server, root)
    page.get_by_role("link", name="Admin").click()
    expect(page.locator("#policy-active")).to_have_text("fifo")
    page.get_by_label("New policy").select_option("srtf")
    switch = page.locator("#policy-switch")
    expect(switch).to_be_disabled()  # no switch before its preview
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#preview-policies tbody th")).to_have_text(
        ["fifo (active)", "srtf"], timeout=WHATIF_TIMEOUT_MS
    )
    expect(page.locator(f'#preview-jobs tr[data-job="{job["id"]}"]')).to_be_visible()
    expect(switch).to_be_enabled()
    expect(switch).to_have_text("Switch to srtf")
    switch.click()
    expect(page.locator("#notice")).to_have_text("The active policy is now srtf.")
    expect(page.locator("#policy-active")).to_have_text("srtf")
    active = httpx.get(f"{server.url}/api/v1/policies/active", headers=root).json()
    assert active["name"] == "srtf"

    row = page.locator(f'tr[data-node="{first_node}"]')
    expect(row.locator('[data-field="state"]')).to_have_text("ready")
    row.get_by_role("button", name=f"drain {first_node}").click()
    expect(row.locator('[data-field="state"]')).to_have_text("cordoned")  # local: at once
    expect(row.get_by_role("button", name=f"uncordon {first_node}")).to_be_enabled()
    page.screenshot(path=ARTIFACTS / "admin.png", full_page=True)

    def moved() -> str | None:
        now = _job(server, root, job["id"])
        nodes: str = now["nodes"]
        return nodes if now["status"] == "Running" and nodes and nodes != first_node else None

    second_node = waiting.wait_for("the job to restart on another node", moved, timeout_s=60)
    page.get_by_role("link", name="Cluster").click()
    drained = page.locator(f'.node[data-node="{first_node}"]')
    expect(drained).to_have_attribute("data-state", "cordoned")
    expect(drained.locator(".node-state")).to_have_text("cordoned")
    expect(drained.locator('.gpu[data-state="mine"]')).to_have_count(0)
    expect(page.locator(f'.node[data-node="{second_node}"] .gpu[data-state="mine"]')).to_have_count(
        4
    )
    page.screenshot(path=ARTIFACTS / "cluster-cordoned.png", full_page=True)
    watched.assert_clean()


def test_a_user_gets_no_admin_controls_and_the_api_refuses_them(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    sign_in(watched, server, alice)
    expect(page.get_by_role("link", name="Queue")).to_be_visible()
    expect(page.get_by_role("link", name="Admin")).to_be_hidden()
    page.goto(f"{server.url}/#/admin")
    expect(page.locator("#admin-refused")).to_contain_text("for admins")
    expect(page.get_by_role("button", name="Preview")).to_have_count(0)
    expect(page.locator("#node-rows")).to_have_count(0)
    expect(page.locator("#user-rows")).to_have_count(0)
    node = httpx.get(f"{server.url}/api/v1/nodes", headers=alice).json()["data"][0]["name"]
    api = f"{server.url}/api/v1"
    refused = [
        httpx.put(f"{api}/policies/active", json={"name": "srtf"}, headers=alice),
        httpx.post(f"{api}/nodes/{node}/drain", headers=alice),
        httpx.post(f"{api}/nodes/{node}/cordon", headers=alice),
        httpx.get(f"{api}/users", headers=alice),
        httpx.post(f"{api}/users", json={"name": "eve", "tenant": "x"}, headers=alice),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert httpx.get(f"{api}/policies/active", headers=alice).json()["name"] == "fifo"
    watched.assert_clean()


def test_an_admin_manages_users_tokens_and_jobs(watched: Watched, server: LiveServer) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    root = auth(server.app, "root", "ops", "admin")
    job = submit(server, alice, name="to-cancel", num_gpus=2, duration_s=LONG_S)
    sign_in(watched, server, root)
    page.get_by_role("link", name="Admin").click()

    page.get_by_label("Name", exact=True).fill("bob")
    page.get_by_label("Tenant", exact=True).fill("speech")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator("#notice")).to_have_text("User bob created (tenant speech, user).")
    bob_row = page.locator('#user-rows tr[data-user="bob"]')
    expect(bob_row).to_contain_text("speech")
    bob_row.get_by_role("button", name="Issue a token for bob").click()
    secret = page.get_by_label("New token for bob (shown only now):")
    expect(secret).to_be_focused()
    token = secret.input_value()
    me = httpx.get(f"{server.url}/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json()["name"] == "bob"

    page.locator('#user-rows tr[data-user="root"]').get_by_role("button").click()
    fresh = page.get_by_label("New token for root (shown only now):").input_value()
    fresh_auth = {"Authorization": f"Bearer {fresh}"}
    assert httpx.get(f"{server.url}/api/v1/users/me", headers=fresh_auth).status_code == 200
    revoke = page.locator("#token-rows").get_by_role("button", name="Revoke token dashboard")
    expect(revoke).to_have_count(1)
    revoke.click()
    expect(page.locator("#notice")).to_contain_text("revoked")
    expect(revoke).to_have_count(0)
    assert httpx.get(f"{server.url}/api/v1/users/me", headers=fresh_auth).status_code == 401

    page.get_by_role("button", name="Cancel job to-cancel").click()
    expect(page.locator("#notice")).to_have_text("Job to-cancel is now Cancelled.")
    expect(page.locator(f'#admin-job-rows tr[data-job="{job["id"]}"]')).to_have_count(0)
    assert job_status(server, alice, job["id"]) == "Cancelled"
    watched.assert_clean()
