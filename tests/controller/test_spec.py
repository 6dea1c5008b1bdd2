"""Cluster specs: presets, shorthands, YAML (with line-accurate errors) and CSV formats."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from controller.model.cluster import Cluster, PcieLevel
from controller.spec import (
    GENERIC_NIC_GBPS,
    RACK_SIZE,
    ClusterSpecError,
    describe,
    load_cluster,
    pcie_topology,
    preset_names,
)


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


def rack_nic_gbps(cluster: Cluster, rack: int) -> float:
    return sum(n.nic_gbps for n in cluster.nodes if n.rack == rack)


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
    from controller.model.profile import PROFILED_GPU_SPEED

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


# --- YAML ---------------------------------------------------------------------------------


MIXED = """
    name: lab
    gpu_types:
      MyGPU: {mem_mib: 24576, pcie_gbps: 252, speed: 0.8}
    node_types:
      mybox:
        gpu: {model: V100-SXM2-16GB, mem_mib: 32768}
        nic_gbps: 100
        numa: [0, 0, 1, 1]
        topology: |
          X   NV2 SYS SYS
          NV2 X   SYS SYS
          SYS SYS X   NV2
          SYS SYS NV2 X
      small:
        gpu: MyGPU
        nic_gbps: 25
        gpus: 2
    racks:
      - name: top
        oversubscription: 2
        nodes:
          - {type: dgx-a100, count: 2}
          - {type: mybox, count: 3, name_prefix: box}
      - nodes: [{type: small}]
"""


def test_yaml_cluster(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path, MIXED))
    assert cluster.name == "lab"
    assert [r.name for r in cluster.racks] == ["top", "r1"]
    names = [n.name for n in cluster.nodes]
    assert names == ["dgx-a100-0", "dgx-a100-1", "box-0", "box-1", "box-2", "small-0"]
    box = cluster.nodes[cluster.node_index("box-1")]
    assert box.gpu_type.mem_mib == 32768 and box.gpu_type.nvlink_gbps == 200
    assert box.pair_gbps(0, 1) == 400 and [g.numa for g in box.gpus] == [0, 0, 1, 1]
    small = cluster.nodes[-1]
    assert small.gpu_type.name == "MyGPU" and small.num_gpus == 2 and small.rack == 1


def test_uplink_is_sum_of_nics_over_oversubscription(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path, MIXED))
    assert rack_nic_gbps(cluster, 0) == 2 * 1600 + 3 * 100
    assert cluster.racks[0].uplink_gbps == pytest.approx((2 * 1600 + 3 * 100) / 2)
    assert cluster.racks[1].uplink_gbps == pytest.approx(25)


def test_yaml_name_defaults_to_file_stem(tmp_path: Path) -> None:
    path = write(tmp_path, "racks: [{nodes: [{type: pcie4}]}]\n", name="tiny.yml")
    assert load_cluster(path).name == "tiny"


BAD_FIELD = """
    name: lab
    node_types:
      mybox:
        gpu: V100-SXM2-16GB
        nic_gbps: 100
        gpus: 4
    racks:
      - name: r0
        nodes:
          - type: mybox
            count: -3
"""


def test_yaml_bad_field_reports_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, BAD_FIELD)
    with pytest.raises(ClusterSpecError) as info:
        load_cluster(path)
    err = info.value
    assert (err.source, err.line, err.field) == (path, 11, "racks[0].nodes[0].count")
    assert str(err) == f"{path}:11: field 'racks[0].nodes[0].count': must be >= 1, got -3"


@pytest.mark.parametrize(
    ("body", "line", "field", "message"),
    [
        (
            "racks:\n  - oversubscription: 0.5\n    nodes: [{type: pcie4}]\n",
            2,
            "racks[0].oversubscription",
            "must be >= 1",
        ),
        ("racks:\n  - nodes: [{type: dgx-b200}]\n", 2, "racks[0].nodes[0].type", "unknown node"),
        ("name: x\nrack: []\n", 2, "rack", "unknown field"),
        ("name: x\n", 1, None, "missing required field 'racks'"),
        (
            "node_types:\n  b:\n    gpu: V100-SXM2-16GB\n    nic_gbps: 0\n    gpus: 2\n"
            "racks: [{nodes: [{type: b}]}]\n",
            4,
            "node_types.b.nic_gbps",
            "must be > 0",
        ),
        (
            "node_types:\n  b:\n    gpu: {model: X1, mem_mib: 1024, pcie_gbps: -5}\n"
            "    nic_gbps: 1\n    gpus: 1\nracks: [{nodes: [{type: b}]}]\n",
            3,
            "node_types.b.gpu.pcie_gbps",
            "must be > 0",
        ),
        (
            "node_types:\n  b:\n    gpu: {model: X1, mem_mib: 1024}\n"
            "    nic_gbps: 1\n    gpus: 1\nracks: [{nodes: [{type: b}]}]\n",
            3,
            "node_types.b.gpu",
            "missing required field 'pcie_gbps'",
        ),
        (
            "node_types:\n  b:\n    gpu: V100-SXM2-16GB\n    nic_gbps: 1\n"
            "    numa: [0, 1]\n    gpus: 4\nracks: [{nodes: [{type: b}]}]\n",
            5,
            "node_types.b.numa",
            "2 entries for 4 GPUs",
        ),
        (
            "node_types:\n  b:\n    gpu: V100-SXM2-16GB\n    nic_gbps: 1\n"
            "    topology: |\n      X PIX\n      PIX X\n      PIX PIX\n"
            "racks: [{nodes: [{type: b}]}]\n",
            5,
            "node_types.b.topology",
            "expected 3",
        ),
        (
            "node_types:\n  b:\n    gpu: V100-SXM2-16GB\n    nic_gbps: 1\n    gpus: 4\n"
            "    topology: |\n      X PIX\n      PIX X\n"
            "racks: [{nodes: [{type: b}]}]\n",
            6,
            "node_types.b.topology",
            "2 GPUs in the matrix but gpus is 4",
        ),
        (
            "node_types:\n  b:\n    gpu: T4-16GB\n    nic_gbps: 1\n"
            "    topology: |\n      X NV1\n      NV1 X\n"
            "racks: [{nodes: [{type: b}]}]\n",
            5,
            "node_types.b.topology",
            "no nvlink_gbps",
        ),
        (
            "racks:\n  - {name: a, nodes: [{type: pcie4}]}\n"
            "  - name: a\n    nodes: [{type: pcie4}]\n",
            3,
            "racks[1].name",
            "duplicate rack name",
        ),
        (
            "racks: [{nodes: [{type: pcie4, count: two}]}]\n",
            1,
            "racks[0].nodes[0].count",
            "integer",
        ),
        ("racks: [\n", 2, None, "not valid YAML"),
        (
            "racks:\n  - oversubscription: .nan\n    nodes: [{type: pcie4}]\n",
            2,
            "racks[0].oversubscription",
            "expected a finite number",
        ),
        (
            "racks: [{nodes: [{type: pcie4, count: 100000000}]}]\n",
            1,
            "racks[0].nodes[0].count",
            "must be <= 100000",
        ),
        (
            "racks:\n  - nodes: [{type: pcie4, count: 60000}]\n"
            "  - nodes: [{type: pcie4, count: 60000}]\n",
            3,
            "racks[1].nodes[0].count",
            "more than 100000 nodes in all",
        ),
        (
            "node_types:\n  b: {gpu: V100-SXM2-16GB, nic_gbps: 1, gpus: 100000}\n"
            "racks: [{nodes: [{type: b}]}]\n",
            2,
            "node_types.b.gpus",
            "must be <= 512",
        ),
    ],
)
def test_yaml_errors(tmp_path: Path, body: str, line: int, field: str | None, message: str) -> None:
    path = str(tmp_path / "c.yaml")
    Path(path).write_text(body, encoding="utf-8")
    with pytest.raises(ClusterSpecError) as info:
        load_cluster(path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert message in err.message
    prefix = f"{path}:{line}: " + (f"field '{field}': " if field else "")
    assert str(err).startswith(prefix)


# --- CSV formats --------------------------------------------------------------------------


def test_tiresias_cluster_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n4,32,8,128,256\n",
        name="cluster_spec.csv",
    )
    cluster = load_cluster(path)
    assert len(cluster.racks) == 4 and len(cluster.nodes) == 128 and cluster.num_gpus == 1024
    assert all(sum(1 for n in cluster.nodes if n.rack == r) == 32 for r in range(4))
    assert cluster.racks[0].uplink_gbps == pytest.approx(32 * GENERIC_NIC_GBPS)


def test_tiresias_three_column_header(tmp_path: Path) -> None:
    path = write(tmp_path, "num_switch,num_node_p_switch,num_gpu_p_node\n1,4,4\n", name="n4g4.csv")
    assert load_cluster(path).num_gpus == 16


def test_tiresias_bad_value_reports_row(tmp_path: Path) -> None:
    path = write(tmp_path, "num_switch,num_node_p_switch,num_gpu_p_node\n2,0,8\n", name="c.csv")
    with pytest.raises(
        ClusterSpecError, match=r"c\.csv:2: field 'num_node_p_switch': must be >= 1"
    ):
        load_cluster(path)


OPENB = """
    sn,cpu_milli,memory_mib,gpu,model
    openb-node-0000,32000,262144,0,
    openb-node-0021,64000,262144,2,P100
    openb-node-0022,128000,786432,8,G3
    openb-node-0023,96000,786432,8,V100M32
    openb-node-0025,32000,131072,4,V100M16
    openb-node-1328,128000,1048576,1,A10
    openb-node-1400,96000,393216,4,T4
    openb-node-0234,96000,393216,8,G2
"""


def test_openb_node_list(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path, OPENB, name="openb_node_list_gpu_node.csv"))
    assert len(cluster.nodes) == 7  # the GPU-less node is dropped
    assert cluster.num_gpus == 2 + 8 + 8 + 4 + 1 + 4 + 8
    by_name = {n.name: n for n in cluster.nodes}
    assert by_name["openb-node-0023"].gpu_type.mem_mib == 32768
    assert by_name["openb-node-0021"].gpu_type.name == "P100-PCIE-16GB"
    assert by_name["openb-node-1328"].gpu_type.name == "A10-24GB"
    assert len(cluster.racks) == 1
    # Allocatable CPU and memory, which pods' requests count against.
    assert (by_name["openb-node-0022"].cpu_milli, by_name["openb-node-0022"].host_mem_mib) == (
        128000,
        786432,
    )


def test_openb_unknown_model_reports_row(tmp_path: Path) -> None:
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,\nn1,1,1,2,K80\n"
    path = write(tmp_path, text, name="nodes.csv")
    with pytest.raises(ClusterSpecError, match=r"nodes\.csv:3: field 'model': unknown GPU model"):
        load_cluster(path)


def test_unknown_csv_header(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b\n1,2\n", name="x.csv")
    with pytest.raises(ClusterSpecError, match="unknown CSV header"):
        load_cluster(path)


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
