"""The Cluster page in depth: each GPU cell names the job on that very GPU (the API's
gpu_list), a shared GPU each job's share, utilisation in the label; a node's name
opens its GPU link matrix; fragmentation and link loads show."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit

LONG_S = 1e6
# Half a V100-16GB's memory and a light model (ncf): the fragmentation-aware placer
# gives each such job a 0.5 share of one GPU.
HALF_GPU: dict[str, Any] = {
    "num_gpus": 1,
    "model": "ncf",
    "gpu_mem_mib": 8192,
    "duration_s": LONG_S,
}


@pytest.fixture()
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"placement": "fragmentation-aware"})


def _gpu_list(server: LiveServer, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """ "node/index" -> the API's view of that GPU."""
    r = httpx.get(f"{server.url}/api/v1/nodes", headers=headers)
    assert r.status_code == 200, r.text
    return {f"{n['name']}/{g['index']}": g for n in r.json()["data"] for g in n["gpu_list"]}


def test_cells_name_the_job_on_each_gpu_and_a_node_opens_its_topology(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    bob = auth(server.app, "bob", "speech")
    whole = submit(server, alice, name="wide", num_gpus=2, model="resnet50", duration_s=LONG_S)
    half = submit(server, alice, name="half", **HALF_GPU)
    theirs = submit(server, bob, name="bobs-half", **HALF_GPU)
    jobs = ((alice, whole), (alice, half), (bob, theirs))
    waiting.wait_for(
        "the three jobs to run",
        lambda: all(job_status(server, h, j["id"]) == "Running" for h, j in jobs),
        timeout_s=60,
    )
    gpus = _gpu_list(server, alice)
    wide_keys = [k for k, g in gpus.items() if [s["job"] for s in g["shares"]] == [whole["id"]]]
    shared_key = next(k for k, g in gpus.items() if len(g["shares"]) == 2)
    assert len(wide_keys) == 2

    sign_in(watched, server, alice)
    for key in wide_keys:
        cell = page.locator(f'#racks button.gpu[data-key="{key}"]')
        expect(cell).to_have_attribute("data-state", "mine")
        expect(cell).to_have_attribute("aria-label", re.compile(rf"job wide \({whole['id'][:8]}"))
        expect(cell).to_have_attribute("aria-label", re.compile(r"utilisation 95%"))
    shared = page.locator(f'#racks button.gpu[data-key="{shared_key}"]')
    expect(shared).to_have_attribute("data-state", "shared")
    expect(shared).to_have_attribute(
        "aria-label", re.compile(rf"job half \({half['id'][:8]}, tenant research\) 50%")
    )
    expect(shared).to_have_attribute("aria-label", re.compile(r"another tenant's job 50%"))
    assert theirs["id"][:8] not in page.content()  # bob's job: a share, no id
    free = [k for k, g in gpus.items() if not g["shares"]]
    expect(page.locator('#racks button.gpu[data-state="free"]')).to_have_count(len(free))
    summary = page.get_by_label("Cluster summary")
    expect(summary).to_contain_text("Fragmented GPUs")
    expect(page.locator("#link-loads")).to_contain_text("No network allocator runs")

    # Keyboard: the shared cell's job, then the node's name opens its link matrix.
    shared.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#gpu-detail")).to_contain_text(half["id"][:8])
    expect(page.locator("#gpu-detail").get_by_role("link", name="Open job half")).to_be_visible()
    node = shared_key.split("/")[0]
    page.locator(f'#racks button.node-name[data-node="{node}"]').focus()
    page.keyboard.press("Enter")
    table = page.locator("#topology table.topology")
    expect(table).to_be_visible()
    expect(page.locator("#topology")).to_be_focused()
    expect(table.locator("caption")).to_contain_text(f"GPU links of {node}")
    expect(table.locator("tbody tr")).to_have_count(4)
    row = table.locator("tbody tr").first
    expect(row.locator("th")).to_have_text("GPU 0")
    expect(row.locator("td").nth(2)).to_contain_text("PIX")  # GPU 0 <-> GPU 1
    expect(row.locator("td").nth(3)).to_contain_text("SYS")  # GPU 0 <-> GPU 2
    page.screenshot(path=ARTIFACTS / "cluster-topology.png", full_page=True)
    page.get_by_role("button", name="Close").click()
    expect(page.locator("#topology")).to_be_hidden()
    watched.assert_clean()
