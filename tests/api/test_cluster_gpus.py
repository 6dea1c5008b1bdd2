"""The cluster view in depth, local mode, PostgreSQL and SQLite: each GPU's shares and
utilisation (another tenant's job unnamed), fragmentation, link loads, topology."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.api.builders import auth, submit, wait_for

API = "/api/v1"
# ncf keeps a GPU 30 % busy (controller/model/catalog/entries.py); with half a V100-16GB's
# memory the fragmentation-aware placer gives it a 0.5 share of one GPU.
HALF_GPU = {"num_gpus": 1, "model": "ncf", "gpu_mem_mib": 8192, "duration_s": 1e6}


@pytest.fixture(params=["postgresql", "sqlite"])
def base_settings(request: pytest.FixtureRequest) -> Settings:
    name = "pg_settings" if request.param == "postgresql" else "sqlite_settings"
    found: Settings = request.getfixturevalue(name)
    return found


def _client(settings: Settings, **overrides: Any) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update=overrides))) as client:
        yield client


@pytest.fixture()
def sharing_client(base_settings: Settings) -> Iterator[TestClient]:
    yield from _client(base_settings, placement="fragmentation-aware")


@pytest.fixture()
def wide_client(base_settings: Settings) -> Iterator[TestClient]:
    yield from _client(base_settings, cluster="2x8")


@pytest.fixture()
def network_client(base_settings: Settings) -> Iterator[TestClient]:
    yield from _client(base_settings, network="fair")


def _gpus(client: TestClient, headers: dict[str, str]) -> dict[tuple[str, int], dict[str, Any]]:
    nodes = client.get(f"{API}/nodes", headers=headers).json()["data"]
    return {(n["name"], g["index"]): g for n in nodes for g in n["gpu_list"]}


def _running(client: TestClient, headers: dict[str, str], count: int) -> bool:
    return bool(client.get(f"{API}/cluster", headers=headers).json()["running"] == count)


def test_each_gpu_names_its_jobs_shares_and_utilisation(sharing_client: TestClient) -> None:
    client = sharing_client
    alice = auth(client, "alice", "vision")
    bob = auth(client, "bob", "speech")
    root = auth(client, "root", "ops", "admin")
    whole = submit(client, alice, num_gpus=2, model="resnet50", duration_s=1e6)
    mine = submit(client, alice, **HALF_GPU)
    theirs = submit(client, bob, **HALF_GPU)
    wait_for(lambda: _running(client, alice, 3))

    gpus = _gpus(client, alice)
    assert len(gpus) == 8 and all(0.0 <= (g["util"] or 0.0) <= 1.0 for g in gpus.values())
    held = {k: g for k, g in gpus.items() if g["shares"]}
    whole_share = {"job": whole["id"], "fraction": 1.0, "name": whole["name"], "tenant": "vision"}
    whole_gpus = [k for k, g in held.items() if g["shares"] == [whole_share]]
    assert len(whole_gpus) == 2 and len({node for node, _ in whole_gpus}) == 1
    shared = [g for g in held.values() if len(g["shares"]) == 2]
    assert len(shared) == 1 and len(held) == 3  # both halves on one GPU
    assert sorted(shared[0]["shares"], key=lambda s: s["job"] or "") == [
        # bob's job, not named to alice, nor its tenant
        {"job": None, "fraction": 0.5, "name": None, "tenant": None},
        {"job": mine["id"], "fraction": 0.5, "name": mine["name"], "tenant": "vision"},
    ]
    # resnet50 alone keeps its GPUs 95 % busy; the two packed ncf jobs add up to one
    # GPU at most; free GPUs are idle.
    assert all(gpus[k]["util"] == pytest.approx(0.95) for k in whole_gpus)
    assert 0.3 <= shared[0]["util"] <= 1.0
    assert all(g["util"] == 0.0 for g in gpus.values() if not g["shares"])

    bobs = [g for g in _gpus(client, bob).values() if len(g["shares"]) == 2]
    assert sorted(s["job"] or "" for s in bobs[0]["shares"]) == ["", theirs["id"]]
    assert all(
        s["job"] in (None, theirs["id"]) for g in _gpus(client, bob).values() for s in g["shares"]
    )
    admins = [g for g in _gpus(client, root).values() if len(g["shares"]) == 2]
    assert sorted((s["job"], s["tenant"]) for s in admins[0]["shares"]) == sorted(
        [(mine["id"], "vision"), (theirs["id"], "speech")]
    )


def _node_jobs(client: TestClient, headers: dict[str, str], job_id: str) -> str:
    body = client.get(f"{API}/jobs/{job_id}", headers=headers).json()
    return str(body["nodes"]) if body["status"] == "Running" else ""


def test_fragmentation_counts_free_gpus_no_waiting_job_fits(wide_client: TestClient) -> None:
    client = wide_client
    root = auth(client, "root", "ops", "admin")
    first, second = (n["name"] for n in client.get(f"{API}/nodes", headers=root).json()["data"])
    # Four busy GPUs on each node: each 4-GPU job placed while the other node is cordoned.
    for busy, fenced in ((first, second), (second, first)):
        assert client.post(f"{API}/nodes/{fenced}/cordon", headers=root).status_code == 200
        job = submit(client, root, num_gpus=4, duration_s=1e6)
        wait_for(lambda job=job, busy=busy: _node_jobs(client, root, job["id"]) == busy)
        assert client.post(f"{API}/nodes/{fenced}/uncordon", headers=root).status_code == 200
    summary = client.get(f"{API}/cluster", headers=root).json()
    assert (summary["gpus_free"], summary["fragmentation"]) == (8, 0)  # nothing waits

    # FIFO: a 16-GPU job waits at the head, the 8-GPU job behind it. No node has 8 free.
    head = submit(client, root, num_gpus=16, duration_s=1e6)
    eight = submit(client, root, num_gpus=8, duration_s=1e6)
    summary = wait_for(
        lambda: (s := client.get(f"{API}/cluster", headers=root).json())["waiting"] == 2 and s
    )
    assert (summary["gpus_free"], summary["fragmentation"]) == (8, 8)
    assert summary["link_loads"] is None  # no network allocator in this service
    assert {head["id"], eight["id"]} == {
        j["id"] for j in client.get(f"{API}/jobs?status=Queued", headers=root).json()["data"]
    }


def test_link_loads_follow_the_network_allocator(network_client: TestClient) -> None:
    client = network_client
    alice = auth(client, "alice", "vision")
    submit(client, alice, num_gpus=8, duration_s=1e6)  # both nodes: a ring of two hops
    wait_for(lambda: _running(client, alice, 1))
    loads = wait_for(lambda: client.get(f"{API}/cluster", headers=alice).json()["link_loads"])
    nodes = [n["name"] for n in client.get(f"{API}/nodes", headers=alice).json()["data"]]
    assert sorted((x["kind"], x["where"]) for x in loads) == sorted(
        (kind, node) for kind in ("nic-up", "nic-down") for node in nodes
    )
    for x in loads:  # one rack: no uplink crossed; each NIC carries the job alone
        assert x["jobs"] == 1 and x["capacity_gbps"] == 100.0
        assert 0.0 < x["load_gbps"] <= x["capacity_gbps"]


def test_topology_gives_each_node_types_link_matrix(any_topology_client: TestClient) -> None:
    client = any_topology_client
    alice = auth(client, "alice", "vision")
    r = client.get(f"{API}/cluster/topology", headers=alice)
    assert r.status_code == 200, r.text
    body = r.json()
    nodes = [n["name"] for n in client.get(f"{API}/nodes", headers=alice).json()["data"]]
    assert [k["nodes"] for k in body["node_types"]] == [nodes]  # 2x4: one type
    kind = body["node_types"][0]
    assert (kind["gpus"], kind["gpu_type"], kind["numa"]) == (4, "V100-PCIE-16GB", [0, 0, 1, 1])
    assert kind["links"] == [
        ["X", "PIX", "SYS", "SYS"],
        ["PIX", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PIX"],
        ["SYS", "SYS", "PIX", "X"],
    ]
    gbps = kind["gbps"]
    assert [gbps[i][i] for i in range(4)] == [None] * 4
    assert gbps[0][1] > gbps[0][2] > 0 and gbps[0][2] == gbps[2][0]  # PIX beats SYS
    assert body["racks"] == [{"name": "r0", "uplink_gbps": 200.0, "nodes": nodes}]
    assert client.get(f"{API}/cluster/topology").status_code == 401


@pytest.fixture()
def any_topology_client(base_settings: Settings) -> Iterator[TestClient]:
    yield from _client(base_settings)


@pytest.fixture()
def clos_client(base_settings: Settings) -> Iterator[TestClient]:
    # two groups of one ToR of one 4-GPU host, every uplink in two ECMP lanes
    yield from _client(base_settings, network="fair", cluster="clos:2x1x1/ecmp2")


def test_link_loads_name_group_links_and_lanes(clos_client: TestClient) -> None:
    client = clos_client
    alice = auth(client, "alice", "vision")
    submit(client, alice, num_gpus=8, duration_s=1e6)  # both hosts: across ToRs and groups
    wait_for(lambda: _running(client, alice, 1))

    def link_loads() -> list[dict[str, Any]] | None:
        r = client.get(f"{API}/cluster", headers=alice)
        assert r.status_code == 200, r.text  # a group link was once a 500
        loads: list[dict[str, Any]] | None = r.json()["link_loads"]
        return loads

    loads = wait_for(link_loads)
    kinds = {x["kind"] for x in loads}
    assert kinds == {"nic-up", "nic-down", "rack-up", "rack-down", "group-up", "group-down"}
    for x in loads:
        if not x["kind"].startswith("nic"):  # "<rack or group>/<lane>", half the uplink
            name, lane = x["where"].rsplit("/", 1)
            assert name in ("g0-t0", "g1-t0", "g0", "g1") and lane in ("0", "1")
