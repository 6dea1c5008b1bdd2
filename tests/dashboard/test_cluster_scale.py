"""The Cluster page for large clusters (issue 30 item 3): the summary first (GPUs by
state, type and tenant, the hottest nodes), racks that collapse and start closed past
512 GPUs, a search by node, job or tenant that opens the node's rack, a heat map of
every GPU that the keyboard moves over, and an admin's colouring by tenant or job with
its legend (by GPU type: test_gpu_types.py). Small clusters keep the tests fast;
bench/dashboard.py measures 1,000 nodes."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, job_status, sign_in, submit

LONG_S = 1e6
OKABE_ITO_BLUE = "rgb(0, 114, 178)"  # palette.js: the first tenant's hue
OKABE_ITO_ORANGE = "rgb(230, 159, 0)"  # the second's


@pytest.fixture()
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    return settings.model_copy(update={"cluster": getattr(request, "param", "4x4")})


def _run(server: LiveServer, jobs: list[tuple[dict[str, str], dict[str, object]]]) -> list[str]:
    """Submit each (headers, spec) and wait until all run; their ids."""
    ids = [(h, submit(server, h, **spec)["id"]) for h, spec in jobs]
    waiting.wait_for(
        "the jobs to run",
        lambda: all(job_status(server, h, i) == "Running" for h, i in ids),
        timeout_s=60,
    )
    return [i for _, i in ids]


def _table(page: Page, caption: str) -> list[list[str]]:
    rows = page.locator("#glance table", has=page.locator("caption", has_text=caption))
    expect(rows).to_have_count(1)
    return [
        [c.strip() for c in r.locator("th, td").all_inner_texts()]
        for r in rows.locator("tbody tr").all()
    ]


def test_summary_counts_gpus_and_an_admin_colours_them_by_tenant_with_a_legend(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    bob = auth(server.app, "bob", "speech")
    root = auth(server.app, "root", "ops", "admin")
    wide, small = _run(
        server,
        [
            (bob, {"name": "bobs-wide", "num_gpus": 4, "duration_s": LONG_S}),
            (alice, {"name": "alices-pair", "num_gpus": 2, "duration_s": LONG_S}),
        ],
    )
    sign_in(watched, server, root)
    expect(page.locator("#glance table")).to_have_count(4)
    # 4x4: 16 GPUs, 6 held by two whole-GPU jobs; resnet50 keeps its GPUs 95 % busy.
    expect(page.locator("#glance")).to_contain_text("research")
    assert _table(page, "GPUs by state") == [
        ["free", "10", "63%"],
        ["allocated", "6", "38%"],
        ["shared", "0", "0%"],
    ]
    (by_type,) = _table(page, "GPUs by type")
    assert by_type[1:] == ["4", "16", "6.0", "36%"]  # 6 x 95 % over 16 GPUs
    # Largest first; each tenant numbered, its hue in a swatch beside it.
    assert _table(page, "GPUs by tenant") == [["1 speech", "4.0", "1"], ["2 research", "2.0", "1"]]
    hottest = [row[2] for row in _table(page, "Hottest nodes")]
    assert hottest[0] == "95%" and 1 <= len(hottest) <= 3  # idle nodes are not listed
    assert hottest == sorted(hottest, key=lambda p: -int(p.rstrip("%")))
    expect(page.locator("#heatmap")).to_have_attribute("data-gpus", "16")

    page.get_by_label("Colour GPUs by").select_option("tenant")
    legend = page.get_by_role("list", name="Legend: GPUs coloured by tenant")
    expect(legend.locator("li")).to_have_text(
        ["1 speech", "2 research", "· other tenants", "free"], use_inner_text=True
    )
    swatches = legend.locator(".swatch")
    assert swatches.nth(0).evaluate("e => getComputedStyle(e).backgroundColor") == OKABE_ITO_BLUE
    assert swatches.nth(1).evaluate("e => getComputedStyle(e).backgroundColor") == OKABE_ITO_ORANGE
    # The cells: a tenant's number, not only its hue; free ones stay white and unnumbered.
    bobs = page.locator("#racks button.gpu", has_text=re.compile(r"^1$"))
    expect(bobs).to_have_count(4)
    expect(bobs.first).to_have_attribute("aria-label", re.compile(rf"job bobs-wide \({wide[:8]}"))
    assert bobs.first.evaluate("e => getComputedStyle(e).backgroundColor") == OKABE_ITO_BLUE
    expect(page.locator("#racks button.gpu", has_text=re.compile(r"^2$"))).to_have_count(2)
    page.screenshot(path=ARTIFACTS / "cluster-by-tenant.png", full_page=True)

    page.get_by_label("Colour GPUs by").select_option("job")
    expect(page.get_by_role("list", name="Legend: GPUs coloured by job")).to_contain_text(
        "Each job's GPUs share one of seven hues"
    )
    page.get_by_label("Colour GPUs by").select_option("util")
    expect(page.get_by_role("list", name="Legend: GPUs coloured by utilisation")).to_contain_text(
        "utilisation 0% → 100%"
    )
    assert small[:8] in page.content()  # an admin sees every job
    watched.assert_clean()


@pytest.mark.parametrize("settings", ["72x8"], indirect=True)
def test_a_large_cluster_starts_closed_and_search_and_keyboard_open_a_node(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    alice = auth(server.app, "alice", "research")
    bob = auth(server.app, "bob", "speech")
    (needle,) = _run(server, [(alice, {"name": "needle", "num_gpus": 1, "duration_s": LONG_S})])
    _run(server, [(bob, {"name": "bobs", "num_gpus": 8, "duration_s": LONG_S})])
    sign_in(watched, server, alice)

    # 576 GPUs: the summary and the heat map, every rack closed and none of its buttons built.
    expect(page.locator("#heatmap")).to_have_attribute("data-gpus", "576")
    racks = page.locator("#racks details.rack")
    assert racks.count() > 1
    expect(page.locator("#racks details.rack[open]")).to_have_count(0)
    expect(page.locator("#racks button.gpu")).to_have_count(0)
    # Another tenant's GPUs counted, its name never shown to alice.
    assert _table(page, "GPUs by tenant") == [
        ["1 research", "1.0", "1"],
        ["other tenants", "8.0", "—"],
    ]
    # By tenant or job for admins only; by utilisation or GPU type for everyone.
    expect(page.get_by_label("Colour GPUs by").locator("option")).to_have_text(
        ["utilisation", "GPU type"]
    )
    assert "speech" not in page.content() and "bobs" not in page.content()

    # A job's name: one node, listed; Enter opens its rack with the focus on the node.
    search = page.get_by_label("Search nodes, jobs or tenants")
    search.fill("needle")
    expect(page.locator("#search-count")).to_have_text(re.compile(r"^1 node matches “needle”"))
    result = page.locator("#search-results button")
    expect(result).to_have_count(1)
    node = result.inner_text()
    search.press("Enter")
    found = page.locator(f'#racks .node[data-node="{node}"]')
    expect(found).to_have_class(re.compile(r"\bfound\b"))
    expect(found.locator("button.node-name")).to_be_focused()
    expect(page.locator("#racks details.rack[open]")).to_have_count(1)
    expect(found.locator("button.gpu", has_text="A")).to_have_attribute(
        "aria-label", re.compile(rf"job needle \({needle[:8]}, tenant research\)")
    )
    # A tenant finds the same node; a node's exact name comes first among its prefixes.
    search.fill("research")
    expect(result).to_have_text([node])
    search.fill("node-7")
    expect(result.first).to_have_text("node-7")
    search.press("Enter")
    expect(page.locator('#racks .node[data-node="node-7"] button.node-name')).to_be_focused()
    search.press("Escape")
    expect(result).to_have_count(0)

    # Racks collapse: by their summary line with the keyboard, and all at once.
    rack_of = "e => e.closest('details').dataset.rack"
    both = {
        found.evaluate(rack_of),
        page.locator('#racks .node[data-node="node-7"]').evaluate(rack_of),
    }
    opened = page.locator("#racks details.rack[open]")
    expect(opened).to_have_count(len(both))
    opened.first.locator("summary").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#racks details.rack[open]")).to_have_count(len(both) - 1)
    page.get_by_role("button", name="Collapse all racks").click()
    expect(page.locator("#racks details.rack[open]")).to_have_count(0)

    # The heat map: arrow keys move over the GPUs, Enter opens the node.
    heat = page.locator("#heatmap")
    heat.focus()
    expect(page.locator("#gpu-detail")).to_contain_text("node-0 GPU 0:")
    page.keyboard.press("ArrowLeft")  # already at the first GPU: stays
    for _ in range(9):
        page.keyboard.press("ArrowRight")
    expect(page.locator("#gpu-detail")).to_contain_text("node-1 GPU 1:")
    page.keyboard.press("Enter")
    expect(page.locator('#racks .node[data-node="node-1"] button.node-name')).to_be_focused()
    page.screenshot(path=ARTIFACTS / "cluster-large.png")
    watched.assert_clean()
