"""The node agent: NVML discovery (through the fake), the topology file, publishing."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from controller.model import PcieLevel
from controller.spec.yaml_spec import presets
from gpuflow.operator_cmd import main as operator_main
from operators import crd
from operators.agent.discovery import discover, gpu_status
from operators.agent.main import EXIT_NO_NVML, AgentOptions, run_agent
from operators.agent.topology_file import load_topology_file
from operators.kube import KubeApi
from operators.nodes import NodeGpus, build_cluster
from tests.kube.fixtures import KubeServer
from tests.operators.fake_nvml import FakeNvml

PRESETS = Path(__file__).resolve().parents[2] / "controller" / "presets"


def initialised(ecc_errors: dict[int, int] | None = None) -> FakeNvml:
    nvml = FakeNvml(ecc_errors=ecc_errors)
    nvml.nvmlInit()
    return nvml


def test_discovery_reads_the_dgx1_topology_as_the_preset_has_it() -> None:
    info = discover(initialised(), nic_gbps=400)
    preset = presets()[1]["dgx1-v100"]
    assert info.gpu_type.name == "V100-SXM2-16GB"
    assert [g.numa for g in info.gpus] == list(preset.numa)
    nv = [[c.nvlinks if c else 0 for c in row] for row in info.links]
    assert nv == [[c.nvlinks if c else 0 for c in row] for row in preset.links]
    assert info.links[0][5] == info.links[5][0]
    assert info.links[0][5] is not None and info.links[0][5].pcie is PcieLevel.SYS
    assert info.labels()[crd.LABEL_GPU_COUNT] == "8"
    assert info.labels()[crd.LABEL_GPU_PRODUCT] == "Tesla-V100-SXM2-16GB"


def test_annotation_round_trips_into_the_cluster_model() -> None:
    info = discover(initialised(), nic_gbps=400)
    back = NodeGpus.from_annotation(info.to_annotation())
    assert (back.gpu_type, back.gpus, back.nic_gbps) == (info.gpu_type, info.gpus, info.nic_gbps)
    labels = [[c.label() if c else "X" for c in row] for row in info.links]
    assert [[c.label() if c else "X" for c in row] for row in back.links] == labels
    node = {"metadata": {"name": "dgx", "annotations": {crd.ANN_NODE_GPUS: info.to_annotation()}}}
    view = build_cluster([node])
    assert view.cluster.nodes[0].pair_gbps(0, 3) == 400.0  # NV2 lanes of 200 Gbit/s


def test_health_reports_ecc_errors_as_unhealthy() -> None:
    status = gpu_status(initialised(ecc_errors={3: 2}))
    assert [s["healthy"] for s in status] == [True, True, True, False] + [True] * 4
    assert status[1]["utilPct"] == 10


def test_no_nvml_is_one_line_and_exit_code_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib, "import_module", lambda _: FakeNvml(missing=True))
    assert run_agent(AgentOptions(node_name="n0")) == EXIT_NO_NVML
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVML unavailable" in err and "--topology-file" in err


def test_real_pynvml_without_a_driver_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert run_agent(AgentOptions(node_name="n0")) == EXIT_NO_NVML
        assert "NVML Shared Library Not Found" in capsys.readouterr().err
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")


def test_a_missing_kubeconfig_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.yaml"
    options = AgentOptions(node_name="n0", kubeconfig=str(missing), once=True)
    assert run_agent(options, nvml=initialised()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"kubeconfig {missing}" in err
    assert operator_main(["operator", "run", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"kubeconfig {missing}" in err


def test_topology_file_takes_a_preset_file() -> None:
    info = load_topology_file(PRESETS / "dgx1-v100.yaml", "box")
    assert len(info.gpus) == 8 and info.nic_gbps == 400
    assert info.links[0][3] is not None and info.links[0][3].nvlinks == 2


def test_agent_publishes_on_its_node(kube_server: KubeServer) -> None:
    api = KubeApi(kube_server.api_client())
    api.create_node({"metadata": {"name": "n0"}})
    code = run_agent(AgentOptions(node_name="n0", once=True), nvml=initialised(), api=api)
    assert code == 0
    node = api.get_node("n0")
    assert node["metadata"]["labels"][crd.LABEL_GPU_COUNT] == "8"
    assert crd.ANN_NODE_GPU_STATUS in node["metadata"]["annotations"]
    view = build_cluster([node])
    assert view.cluster.num_gpus == 8 and not view.unhealthy
