"""Cluster specs: presets, shorthands, arguments and bounds, the summary.

The YAML and CSV formats are tests/controller/test_spec_files.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model.cluster import PcieLevel
from controller.spec import (
    GENERIC_NIC_GBPS,
    RACK_SIZE,
    ClusterSpecError,
    cluster_summary,
    describe,
    load_cluster,
    named_cluster,
    named_cluster_gpus,
    pcie_topology,
    preset_names,
)
from tests.controller.conftest import rack_nic_gbps, write

# --- presets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "gpus_per_node", "gpu", "pair", "pair_gbps", "nic_gbps"),
    [
        ("dgx-h100", 8, "H100-SXM5-80GB", (0, 7), 18 * 200, 3200),
        ("dgx-a100", 8, "A100-SXM4-40GB", (2, 5), 12 * 200, 1600),
        ("dgx1-v100", 8, "V100-SXM2-16GB", (0, 3), 2 * 200, 400),
        ("dgx1-v100", 8, "V100-SXM2-16GB", (0, 1), 1 * 200, 400),
        ("pcie4", 4, "V100-PCIE-16GB", (0, 1), 126, 25),
    ],
)
def test_preset_loads_one_rack_of_four(
    preset: str,
    gpus_per_node: int,
    gpu: str,
    pair: tuple[int, int],
    pair_gbps: float,
    nic_gbps: float,
) -> None:
    cluster = load_cluster(preset)
    assert len(cluster.nodes) == 4 and len(cluster.racks) == 1
    assert cluster.gpus_per_node == (gpus_per_node,) * 4
    node = cluster.nodes[0]
    assert node.gpu_type.name == gpu
    assert node.pair_gbps(*pair) == pytest.approx(pair_gbps)
    assert node.pair_gbps(*reversed(pair)) == pytest.approx(pair_gbps)
    assert node.nic_gbps == nic_gbps
    assert cluster.racks[0].uplink_gbps == pytest.approx(4 * nic_gbps)


def test_preset_names() -> None:
    assert preset_names() == ["dgx-a100", "dgx-h100", "dgx1-v100", "g4dn-12xlarge", "pcie4"]


def test_the_pollux_testbed_runs_measured_steps_at_their_measured_speed() -> None:
    from controller.model.catalog.profile import PROFILED_GPU_SPEED

    cluster = load_cluster("g4dn-12xlarge:16")
    assert (len(cluster.nodes), cluster.num_gpus) == (16, 64)
    node = cluster.nodes[0]
    assert node.gpu_type.speed == PROFILED_GPU_SPEED
    assert node.nic_gbps == 50


def test_dgx1_cross_socket_pairs_without_nvlink_are_sys() -> None:
    node = load_cluster("dgx1-v100").nodes[0]
    link = node.links[0][5]
    assert link is not None and link.nvlinks == 0 and link.pcie is PcieLevel.SYS
    assert node.pair_gbps(0, 5) < node.pair_gbps(0, 1)
    # Every V100 in the hybrid cube-mesh uses all six of its NVLink lanes.
    for i in range(8):
        assert sum(link.nvlinks for link in node.links[i] if link) == 6
    assert [g.numa for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_nvswitch_presets_link_every_pair() -> None:
    for preset, lanes in (("dgx-h100", 18), ("dgx-a100", 12)):
        node = load_cluster(preset).nodes[0]
        assert {link.nvlinks for row in node.links for link in row if link} == {lanes}


def test_preset_with_count_fills_racks_of_sixteen() -> None:
    cluster = load_cluster("dgx-a100:32")
    assert cluster.name == "dgx-a100:32"
    assert len(cluster.nodes) == 32 and cluster.num_gpus == 256
    assert len(cluster.racks) == 2
    assert [n.name for n in cluster.nodes[:2]] == ["dgx-a100-0", "dgx-a100-1"]
    assert load_cluster("dgx-h100:20").racks[1].uplink_gbps == pytest.approx(4 * 3200)


# --- NODESxGPUS ---------------------------------------------------------------------------


def test_shorthand_16x4_is_one_rack() -> None:
    cluster = load_cluster("16x4")
    assert len(cluster.nodes) == 16 and cluster.num_gpus == 64
    assert len(cluster.racks) == 1
    assert cluster.racks[0].uplink_gbps == pytest.approx(16 * GENERIC_NIC_GBPS)
    node = cluster.nodes[0]
    assert node.gpu_type.name == "V100-PCIE-16GB"
    assert [link.label() if link else "X" for link in node.links[0]] == ["X", "PIX", "SYS", "SYS"]


def test_shorthand_256x8_is_sixteen_racks() -> None:
    cluster = load_cluster("256x8")
    assert cluster.num_gpus == 2048 and len(cluster.racks) == 256 // RACK_SIZE == 16
    assert all(sum(1 for n in cluster.nodes if n.rack == r) == 16 for r in range(16))
    for r in range(16):
        assert cluster.racks[r].uplink_gbps == pytest.approx(rack_nic_gbps(cluster, r))


def test_shorthand_uneven_last_rack() -> None:
    cluster = load_cluster("20x2")
    assert [sum(1 for n in cluster.nodes if n.rack == r) for r in range(2)] == [16, 4]


@pytest.mark.parametrize(
    ("gpus", "row0", "numa"),
    [
        (1, ["X"], [0]),
        (2, ["X", "PIX"], [0, 0]),
        (3, ["X", "PIX", "SYS"], [0, 0, 1]),
        (8, ["X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"], [0, 0, 0, 0, 1, 1, 1, 1]),
    ],
)
def test_pcie_topology(gpus: int, row0: list[str], numa: list[int]) -> None:
    links, numa_out = pcie_topology(gpus)
    assert [link.label() if link else "X" for link in links[0]] == row0
    assert list(numa_out) == numa
    assert all(links[i][j] == links[j][i] for i in range(gpus) for j in range(gpus))


def test_gpu_uuids_are_deterministic_and_unique() -> None:
    a, b = load_cluster("4x8"), load_cluster("4x8")
    uuids = [g.uuid for n in a.nodes for g in n.gpus]
    assert uuids == [g.uuid for n in b.nodes for g in n.gpus]
    assert len(set(uuids)) == 32 and all(u.startswith("GPU-") for u in uuids)
    # Same node names in another cluster: other UUIDs.
    assert load_cluster("4x4").nodes[0].gpus[0].uuid != uuids[0]


# --- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("arg", ["dgx-b200", "16by4", "dgx-a100:", "x:3"])
def test_unknown_argument_lists_presets_and_shorthand(arg: str) -> None:
    with pytest.raises(ClusterSpecError) as info:
        load_cluster(arg)
    text = str(info.value)
    assert text.startswith(f"{arg}: ")
    for name in ("dgx-h100", "dgx-a100", "dgx1-v100", "pcie4", "NODESxGPUS"):
        assert name in text


@pytest.mark.parametrize("arg", ["0x8", "4x0", "dgx-a100:0"])
def test_zero_counts_are_rejected(arg: str) -> None:
    with pytest.raises(ClusterSpecError, match=f"^{arg}: "):
        load_cluster(arg)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("100001x8", "at most 100000 nodes of at most 512 GPUs"),
        ("4x513", "at most 100000 nodes of at most 512 GPUs"),
        ("dgx-a100:100001", "needs 1 <= N <= 100000"),
        ("100000x16", "1600000 GPUs in all: more than 100000"),
        ("62500x16", "1000000 GPUs in all: more than 100000"),
    ],
)
def test_sizes_past_the_bounds_are_rejected_at_once(arg: str, message: str) -> None:
    with pytest.raises(ClusterSpecError, match=f"^{arg}: .*{message}"):
        load_cluster(arg)


@pytest.mark.parametrize(
    "arg",
    [
        "16x4",
        "3x8",
        "dgx-a100",
        "pcie4:37",
        "lingjun",
        "lingjun/ecmp8",
        "clos:2x3x5",
        "clos:2x3x5/ecmp4",
        "100001x8",
        "62500x16",
        "dgx-a100:0",
        "dgx-b200",
        "clos:2x0x5",
        "clos:2x3",
        "clos:100x100x100",
        "clos:2x3x5/ecmp65",
        "lingjun/ecmp0",
        "./cluster.yaml",
    ],
)
def test_the_size_of_a_named_cluster_is_known_without_building_it(arg: str) -> None:
    """named_cluster_gpus (what the API checks a request with) refuses what
    named_cluster refuses, with the same message, and counts the GPUs it builds."""
    try:
        built = sum(len(n.gpus) for n in named_cluster(arg).nodes)
    except ClusterSpecError as exc:
        with pytest.raises(ClusterSpecError) as info:
            named_cluster_gpus(arg)
        assert str(info.value) == str(exc)
    else:
        assert named_cluster_gpus(arg) == built


def test_a_topology_matrix_past_the_gpu_bound_is_refused(tmp_path: Path) -> None:
    n = 513
    rows = "\n".join(
        "        " + " ".join("X" if i == j else "PIX" for j in range(n)) for i in range(n)
    )
    text = (
        "node_types:\n  b:\n    gpu: V100-SXM2-16GB\n    nic_gbps: 1\n    topology: |\n"
        f"{rows}\nracks: [{{nodes: [{{type: b}}]}}]\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ClusterSpecError, match=r"field 'node_types\.b\.topology': 513 GPUs"):
        load_cluster(str(path))


def test_yaml_past_the_gpu_bound_names_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "node_types:\n  b: {gpu: V100-SXM2-16GB, nic_gbps: 1, gpus: 512}\n"
        "racks: [{nodes: [{type: b, count: 2000}]}]\n",
        name="c.yaml",
    )
    with pytest.raises(ClusterSpecError, match=rf"^{path}: 1024000 GPUs in all"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1000,1000,8", "1000 x 1000 nodes: more than 100000"),
        ("2,2,1000", "field 'num_gpu_p_node': must be <= 512"),
    ],
)
def test_tiresias_spec_past_the_bounds_is_rejected(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, f"num_switch,num_node_p_switch,num_gpu_p_node\n{row}\n", name="c.csv")
    with pytest.raises(ClusterSpecError, match=rf"c\.csv:2: {message}"):
        load_cluster(path)


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ClusterSpecError, match="no such file"):
        load_cluster(path)


def test_describe_summarises() -> None:
    text = describe(load_cluster("dgx1-v100:20"))
    assert text.splitlines()[0] == "cluster dgx1-v100:20: 20 nodes, 160 GPUs, 2 racks"
    assert "20 nodes x 8 V100-SXM2-16GB" in text and "NV2/NV1/SYS" in text
    assert "NIC 400 Gbit/s" in text
    assert "1 rack x 16 nodes, uplink 6400 Gbit/s" in text
    assert "1 rack x 4 nodes, uplink 1600 Gbit/s" in text
    assert "sharing mps" in text


def test_the_summary_holds_what_the_scheduler_believes() -> None:
    summary = cluster_summary(load_cluster("lingjun"))
    assert (summary["nodes"], summary["gpus"]) == (847, 6776)
    (kind,) = summary["node_types"]
    assert kind["count"] == 847 and kind["gpus_per_node"] == 8
    assert kind["gpu"] == {
        "model": "A100-SXM4-40GB",
        "products": ["NVIDIA A100-SXM4-40GB"],
        "catalogued": True,
        "mem_mib": 40960,
        "speed": 2.5,
        "nvlink_gbps": 200.0,
        "pcie_gbps": 252.0,
    }
    assert kind["gpu_pairs"] == ["NV12"] and kind["sharing"] == "mps"
    assert len(summary["racks"]) == 119 and len(summary["groups"]) == 3
    rack = summary["racks"][0]
    assert rack["group"] in {g["name"] for g in summary["groups"]}
    assert rack["uplink_gbps"] == rack["nodes"] * 1600 / rack["oversubscription"]
