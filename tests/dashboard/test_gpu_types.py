"""GPU types on the dashboard (issue 31, item 4): the Cluster page colours GPUs by their
node's type, with a legend naming each type, and the Job page lists the job's speed on
each type it has run on. Local mode on a cluster of two types: one node of four V100s,
one of four K80s."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from api.settings import Settings
from tests import waiting
from tests.api.builders import auth
from tests.dashboard.conftest import LiveServer, Watched, sign_in, submit

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


def test_gpus_coloured_by_type_and_a_job_s_speed_on_each_type_it_ran_on(
    watched: Watched, server: LiveServer
) -> None:
    page = watched.page
    admin = auth(server.app, "root", "ops", "admin")
    job = submit(server, admin, name="mover", num_gpus=4, batch_size=64, duration_s=1e6)
    first = waiting.wait_for(
        "the job to run", lambda: (j := _job(server, admin, job["id"]))["nodes"] and j, 60
    )
    # Drained, its node gives the job up: it restarts on the other type's node.
    r = httpx.post(f"{server.url}/api/v1/nodes/{first['nodes']}/drain", headers=admin)
    assert r.status_code == 200, r.text
    waiting.wait_for(
        "the job on both types",
        lambda: len(_job(server, admin, job["id"])["type_throughput"] or []) == 2,  # type: ignore[arg-type]
        60,
    )
    rows = _job(server, admin, job["id"])["type_throughput"]
    speeds = {r["gpu_type"]: r["steps_per_s"] for r in rows}  # type: ignore[union-attr,index]
    assert speeds[V100] > speeds[K80] > 0  # the rate model's: a V100 is the faster

    sign_in(watched, server, admin)
    page.goto(f"{server.url}/#/cluster")
    v100_cell = page.locator('.node[data-gpu-type="V100-SXM2-16GB"] button.gpu').first
    k80_cell = page.locator('.node[data-gpu-type="K80"] button.gpu').first
    expect(v100_cell).to_be_visible()
    type_legend = page.get_by_label("GPU types")
    expect(type_legend).to_be_hidden()
    by_state = v100_cell.evaluate("e => getComputedStyle(e).backgroundColor")
    page.get_by_label("Colour GPUs by").select_option("type")
    expect(type_legend).to_be_visible()
    expect(page.get_by_label("Legend", exact=True)).to_be_hidden()
    expect(type_legend.locator("li")).to_have_text([K80, V100])  # name order
    colour = "e => getComputedStyle(e).backgroundColor"
    swatch = {
        t: type_legend.locator(f'li[data-gpu-type="{t}"] .swatch').evaluate(colour)
        for t in (V100, K80)
    }
    assert swatch[V100] != swatch[K80]
    assert v100_cell.evaluate(colour) == swatch[V100] != by_state
    assert k80_cell.evaluate(colour) == swatch[K80]
    # The letters still say which GPUs are allocated: the job's, on the node not drained.
    now_on = page.locator(f'.node:not([data-node="{first["nodes"]}"]) button.gpu')
    expect(now_on).to_have_text(["A"] * 4)
    expect(page.locator(f'.node[data-node="{first["nodes"]}"] button.gpu')).to_have_text(["·"] * 4)
    page.get_by_label("Colour GPUs by").select_option("state")
    expect(type_legend).to_be_hidden()
    assert v100_cell.evaluate(colour) == by_state

    page.goto(f"{server.url}/#/job/{job['id']}")
    table = page.get_by_role("table", name="Throughput by GPU type")
    expect(table.locator("tbody tr")).to_have_count(2)
    for gpu in (V100, K80):
        row = table.locator(f'tr[data-gpu-type="{gpu}"]')
        expect(row).to_contain_text(f"{speeds[gpu]:.3f}")
        expect(row).to_contain_text(f"{64 * speeds[gpu]:.1f}")
        expect(row).to_contain_text("simulated")
    watched.assert_clean()
