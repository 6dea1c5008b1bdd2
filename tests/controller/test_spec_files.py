"""Cluster spec files: YAML (with line-accurate errors) and the CSV formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.model.sharing import DEFAULT_SHARING, SharingMode
from controller.spec import GENERIC_NIC_GBPS, ClusterSpecError, load_cluster
from tests.controller.conftest import rack_nic_gbps, write

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


def test_a_racks_uplinks_are_its_ecmp_lanes(tmp_path: Path) -> None:
    body = (
        "racks:\n  - {oversubscription: 4, uplinks: 2, nodes: [{type: pcie4, count: 8}]}\n"
        "  - {nodes: [{type: pcie4, name_prefix: b}]}\n"
    )
    cluster = load_cluster(write(tmp_path, body))
    assert [r.uplinks for r in cluster.racks] == [2, 1]
    assert cluster.racks[0].uplink_gbps == pytest.approx(8 * 25 / 4)  # in all, not a lane


NVML_NAMED = """
    sharing: time-slicing
    node_types:
      hgx:
        gpu: NVIDIA H200
        nic_gbps: 400
        gpus: 8
      l4box:
        gpu: {model: NVIDIA-L4, speed: 0.6}
        nic_gbps: 25
        gpus: 4
        sharing: mps
    racks:
      - nodes: [{type: hgx}, {type: l4box}, {type: pcie4}]
"""


def test_gpu_models_by_the_names_nvml_reports_and_sharing_modes(tmp_path: Path) -> None:
    hgx, l4box, pcie4 = load_cluster(write(tmp_path, NVML_NAMED)).nodes
    assert hgx.gpu_type.name == "H200-SXM-141GB" and hgx.gpu_type.mem_mib == 141 * 1024
    assert hgx.gpu_type.pcie_gbps == 504 and hgx.gpu_type.speed == pytest.approx(7.18)
    assert (l4box.gpu_type.name, l4box.gpu_type.speed) == ("L4-24GB", 0.6)
    # The cluster's mode, unless the node type states its own.
    assert [n.sharing for n in (hgx, l4box, pcie4)] == [
        SharingMode.TIME_SLICING,
        SharingMode.MPS,
        SharingMode.TIME_SLICING,
    ]
    assert (
        load_cluster(write(tmp_path, "racks: [{nodes: [{type: pcie4}]}]\n")).nodes[0].sharing
        is DEFAULT_SHARING
    )


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
        (
            "sharing: mig\nracks: [{nodes: [{type: pcie4}]}]\n",
            1,
            "sharing",
            "unknown sharing mode 'mig' (known: time-slicing, mps)",
        ),
        (
            "node_types:\n  b:\n    gpu: NVIDIA H100\n    nic_gbps: 1\n    gpus: 1\n"
            "racks: [{nodes: [{type: b}]}]\n",
            3,
            "node_types.b.gpu",
            "unknown GPU model 'NVIDIA H100'",
        ),
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
            "racks:\n  - uplinks: 65\n    nodes: [{type: pcie4}]\n",
            2,
            "racks[0].uplinks",
            "must be <= 64",
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
    text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,\nn1,1,1,2,X9000\n"
    path = write(tmp_path, text, name="nodes.csv")
    with pytest.raises(ClusterSpecError, match=r"nodes\.csv:3: field 'model': unknown GPU model"):
        load_cluster(path)


def test_unknown_csv_header(tmp_path: Path) -> None:
    path = write(tmp_path, "a,b\n1,2\n", name="x.csv")
    with pytest.raises(ClusterSpecError, match="unknown CSV header"):
        load_cluster(path)
