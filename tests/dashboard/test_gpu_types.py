"""GPU types on the dashboard (issue 31, item 4): any user may colour the Cluster page's
GPUs, in its racks and its heat map, by their node's type, with a legend naming each
type (a node's heading and a GPU's detail name it too), and the Job page lists the
job's speed on each type it has run on. Local mode on a cluster of two types: one node
of four V100s, one of four K80s."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import ARTIFACTS, LiveServer, Watched, sign_in, submit

V100, K80 = "V100-SXM2-16GB", "K80"  # the catalogue names NVML's "Tesla K80" K80
CLUSTER = f"""name: two-types
node_types:
  v100x4: {{gpu: {V100}, gpus: 4, nic_gbps: 25}}
  k80x4: {{gpu: Tesla K80, gpus: 4, nic_gbps: 25}}
racks:
  - name: r0
    nodes:
      - {{type: v100x4, count: 1, name_prefix: v100}}
      - {{type: k80x4, count: 1, name_prefix: k80}}
"""


@pytest.fixture()
def settings(settings: Settings, tmp_path: Path) -> Settings:
    path = tmp_path / "two-types.yaml"
    path.write_text(CLUSTER)
    return settings.model_copy(update={"cluster": str(path)})


def _job(server: LiveServer, headers: dict[str, str], job_id: str) -> dict[str, object]:
    r = httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


# palette.js: the types in name order take the Okabe-Ito hues in turn.
K80_HUE, V100_HUE = "rgb(0, 114, 178)", "rgb(230, 159, 0)"
COLOUR = "e => getComputedStyle(e).backgroundColor"
# Counts the heat map's pixels of exactly each hue (the cells; anti-aliased text and
# the seams take other values).
PIXELS = """(c, hues) => {
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const counts = hues.map(() => 0);
  for (let i = 0; i < d.length; i += 4) {
    const px = `rgb(${d[i]}, ${d[i + 1]}, ${d[i + 2]})`;
    hues.forEach((h, k) => { if (h === px) counts[k] += 1; });
  }
  return counts;
}"""


def test_gpus_coloured_by_type_and_a_job_s_speed_on_each_type_it_ran_on(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    admin = auth(server.app, "root", "ops", "admin")
    alice = auth(server.app, "alice", "research")  # not an admin: a GPU's type is no secret
    job = submit(server, alice, name="mover", num_gpus=4, batch_size=64, duration_s=1e6)
    first = waiting.wait_for(
        "the job to run", lambda: (j := _job(server, alice, job["id"]))["nodes"] and j, 60
    )
    # Drained, its node gives the job up: it restarts on the other type's node.
    r = httpx.post(f"{server.url}/api/v1/nodes/{first['nodes']}/drain", headers=admin)
    assert r.status_code == 200, r.text
    waiting.wait_for(
        "the job on both types",
        lambda: len(_job(server, alice, job["id"])["type_throughput"] or []) == 2,  # type: ignore[arg-type]
        60,
    )
    rows = _job(server, alice, job["id"])["type_throughput"]
    speeds = {r["gpu_type"]: r["steps_per_s"] for r in rows}  # type: ignore[union-attr,index]
    assert speeds[V100] > speeds[K80] > 0  # the rate model's: a V100 is the faster

    sign_in(watched, server, alice)
    page.goto(f"{server.url}/#/cluster")
    cells = {t: page.locator(f'.node[data-gpu-type="{t}"] button.gpu') for t in (V100, K80)}
    expect(cells[V100]).to_have_count(4)
    expect(cells[K80]).to_have_count(4)
    # The headings name each node's type, whatever the colouring.
    expect(page.locator(f'.node[data-gpu-type="{V100}"] button.node-name')).to_contain_text(V100)
    choice = page.get_by_label("Colour GPUs by")
    expect(choice.locator("option")).to_have_text(["utilisation", "GPU type"])  # no tenants
    heat = page.locator("#heatmap")
    expect(heat).to_have_attribute("data-gpus", "8")
    assert heat.evaluate(PIXELS, [V100_HUE, K80_HUE]) == [0, 0]
    by_util = cells[V100].first.evaluate(COLOUR)

    # With the keyboard, as a select is used: the next choice is GPU type.
    choice.focus()
    page.keyboard.press("ArrowDown")
    expect(choice).to_have_value("type")
    legend = page.get_by_role("list", name="Legend: GPUs coloured by GPU type")
    types = legend.locator("li[data-gpu-type]")
    expect(types).to_have_text([K80, V100])  # name order
    assert types.nth(0).locator(".swatch").evaluate(COLOUR) == K80_HUE
    assert types.nth(1).locator(".swatch").evaluate(COLOUR) == V100_HUE
    expect(legend).to_contain_text("A GPU's letter keeps its state (· free, A allocated")
    # Every GPU its node's hue, free or not; the letters still say which are the job's.
    for t, hue in ((V100, V100_HUE), (K80, K80_HUE)):
        for i in range(4):
            assert cells[t].nth(i).evaluate(COLOUR) == hue
    moved = page.locator(f'.node:not([data-node="{first["nodes"]}"]) button.gpu')
    expect(moved).to_have_text(["A"] * 4)
    expect(page.locator(f'.node[data-node="{first["nodes"]}"] button.gpu')).to_have_text(["·"] * 4)
    # The heat map: as many pixels of each hue (four GPUs of each type), and a GPU's
    # detail names its type.
    v100_px, k80_px = heat.evaluate(PIXELS, [V100_HUE, K80_HUE])
    assert v100_px == k80_px > 0
    heat.focus()
    node_0 = page.locator("#racks .node").first
    name, gpu_type = node_0.get_attribute("data-node"), node_0.get_attribute("data-gpu-type")
    detail = re.compile(rf"^{name} GPU 0: .* · {gpu_type}")
    expect(page.locator("#gpu-detail")).to_contain_text(detail)
    page.screenshot(path=ARTIFACTS / "cluster-by-type.png", full_page=True)

    choice.select_option("util")
    expect(page.get_by_role("list", name="Legend: GPUs coloured by utilisation")).to_be_visible()
    expect(cells[V100].first).not_to_have_css("background-color", V100_HUE)
    assert cells[V100].first.evaluate(COLOUR) == by_util
    assert heat.evaluate(PIXELS, [V100_HUE, K80_HUE]) == [0, 0]

    page.goto(f"{server.url}/#/job/{job['id']}")
    table = page.get_by_role("table", name="Throughput by GPU type")
    expect(table.locator("tbody tr")).to_have_count(2)
    for gpu in (V100, K80):
        row = table.locator(f'tr[data-gpu-type="{gpu}"]')
        expect(row).to_contain_text(f"{speeds[gpu]:.3f}")
        expect(row).to_contain_text(f"{64 * speeds[gpu]:.1f}")
        expect(row).to_contain_text("simulated")
    watched.assert_clean()
