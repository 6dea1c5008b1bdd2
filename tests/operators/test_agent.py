"""The node agent: NVML discovery (through the fake), the topology file, publishing
(on the session's real control plane, `kube_cluster`: the Nodes the agent writes to
are bare ones the test makes, without a kubelet's heartbeat, which the tests' few
seconds do not need)."""

from __future__ import annotations

import importlib
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller.model import PcieLevel
from controller.model.gpus import GPU_CATALOG
from controller.model.sharing import SharingMode
from controller.spec.yaml_spec import presets
from gpuflow.operator_cmd import main as operator_main
from operators import crd
from operators.agent.discovery import discover, gpu_status
from operators.agent.main import EXIT_NO_NVML, AgentOptions, run_agent
from operators.agent.topology_file import load_topology_file
from operators.nodes import NodeGpus, build_cluster
from tests.nvml_names import NVML_NAMES
from tests.operators.fake_nvml import H200_MEM, V100_FIGURES, FakeNvml, GpuFigures
from tests.operators.real_cluster import RealCluster

PRESETS = Path(__file__).resolve().parents[2] / "controller" / "presets"
# An H100 SXM as NVML reports it (nvidia-smi -q: 16,896 cores, 1,980 MHz SM and 2,619
# MHz memory maximum clocks, a 5,120-bit HBM3 bus, PCIe Gen5), under a product name
# the catalogue does not have.
H100_FIGURES = GpuFigures((9, 0), 16896, 1980, 2619, 5120, 5, mem_bytes=80 * 1024**3)


def initialised(ecc_errors: dict[int, int] | None = None, **kwargs: Any) -> FakeNvml:
    nvml = FakeNvml(ecc_errors=ecc_errors, **kwargs)
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


def test_health_reports_memory_temperature_power_and_ecc_per_gpu() -> None:
    nvml = initialised(
        ecc_errors={2: 1},
        temperature_c={0: 71},
        power_mw={0: 251_456},
        mem_used={0: 9 * 1024**3},
    )
    status = gpu_status(nvml)
    first = status[0]
    assert first["memUsedMib"] == 9 * 1024 and first["memTotalMib"] == 16_160
    assert (first["temperatureC"], first["powerW"], first["eccErrors"]) == (71, 251.5, 0)
    assert (status[1]["temperatureC"], status[1]["powerW"]) == (40, 60.0)  # idle
    assert (status[2]["eccErrors"], status[2]["healthy"]) == (1, False)


def test_readings_a_gpu_does_not_support_are_null_and_a_lost_gpu_is_unhealthy() -> None:
    nvml = initialised(no_ecc=frozenset({1}), no_power=frozenset({1}), lost=frozenset({5}))
    status = gpu_status(nvml)
    # No ECC (a consumer part): no errors to count, so healthy, and the count unknown.
    assert (status[1]["eccErrors"], status[1]["powerW"], status[1]["healthy"]) == (
        None,
        None,
        True,
    )
    assert status[1]["temperatureC"] == 40
    assert status[5] == {"uuid": "GPU-fake0000-0000-0000-0000-000000000005", "healthy": False}


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


def test_agent_publishes_on_its_node(kube_cluster: RealCluster) -> None:
    api = kube_cluster.api
    api.create_node({"metadata": {"name": "n0"}})
    code = run_agent(AgentOptions(node_name="n0", once=True), nvml=initialised(), api=api)
    assert code == 0
    node = api.get_node("n0")
    assert node["metadata"]["labels"][crd.LABEL_GPU_COUNT] == "8"
    assert crd.ANN_NODE_GPU_STATUS in node["metadata"]["annotations"]
    view = build_cluster([node])
    assert view.cluster.num_gpus == 8 and not view.unhealthy
    # the GPU shares pods request (no device plugin publishes them): 100 per GPU
    assert node["status"]["capacity"][crd.RESOURCE_GPU_SHARE] == "800"
    assert node["status"]["allocatable"][crd.RESOURCE_GPU_SHARE] == "800"


def test_agent_publishes_each_pods_gpu_use_on_its_node(
    kube_cluster: RealCluster, tmp_path: Path
) -> None:
    """A pod's process on GPU 0 (found by its cgroup under --proc-root) reaches the
    Node's gpu-status, and from there the operator's ClusterView."""
    api = kube_cluster.api
    api.create_node({"metadata": {"name": "n1"}})
    pod = api.create_pod(
        "default",
        {
            "metadata": {"name": "mlp-worker-0"},
            "spec": {"nodeName": "n1", "containers": [{"name": "w", "image": "x"}]},
        },
    )
    uid = pod["metadata"]["uid"]
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-o-1.scope\n"
    )
    nvml = initialised()
    nvml.run(0, 4242, 1536 * 1024**2, ((10, 5), (20, 7)))
    options = AgentOptions(node_name="n1", once=True, proc_root=str(tmp_path))
    assert run_agent(options, nvml=nvml, api=api) == 0
    view = build_cluster([api.get_node("n1")])
    use = view.pod_use["default/mlp-worker-0"]
    assert (use.util, use.mem_mib, use.alone) == (0.06, 1536, True)


@pytest.mark.parametrize(("product", "name"), sorted(NVML_NAMES.items()))
def test_every_nvml_product_is_published_as_its_catalogue_entry(product: str, name: str) -> None:
    nvml = initialised(product=product)
    info = discover(nvml, nic_gbps=100)
    measured_mib = nvml.nvmlDeviceGetMemoryInfo(0).total // 2**20
    # The catalogue's figures, with the memory NVML measures (the fake's V100 total).
    catalogue = GPU_CATALOG.by_name[name].gpu_type()
    assert info.gpu_type == replace(catalogue, mem_mib=measured_mib) and info.unknown is None
    assert info.product == product


def test_an_h200_publishes_the_memory_nvml_measures_not_its_datasheets() -> None:
    figures = replace(V100_FIGURES, compute_capability=(9, 0), mem_bytes=H200_MEM)
    info = discover(initialised(product="NVIDIA H200", figures=figures), nic_gbps=100)
    catalogue = GPU_CATALOG.by_name["H200-SXM-141GB"].gpu_type()
    assert catalogue.mem_mib == 144_384  # the datasheet's 141 GB
    assert info.gpu_type.name == catalogue.name and info.gpu_type.speed == catalogue.speed
    assert info.gpu_type.mem_mib == 143_771  # NVML's total on issue 27's H200
    assert json.loads(info.to_annotation())["memMib"] == 143_771
    assert info.labels()[crd.LABEL_GPU_MEMORY] == "143771"
    back = NodeGpus.from_annotation(info.to_annotation())
    assert back.gpu_type.mem_mib == 143_771  # what the operator's placers read


def test_an_unknown_gpu_gets_a_speed_derived_from_what_nvml_says() -> None:
    nvml = initialised(product="NVIDIA H100 Next", figures=H100_FIGURES)
    info = discover(nvml, nic_gbps=100)
    assert info.gpu_type.name == "H100-Next"
    # The same figures as the catalogue's H100: the same speed, not 1.0.
    assert info.gpu_type.speed == pytest.approx(6.0, abs=0.01)
    assert info.gpu_type.mem_mib == 80 * 1024 and info.gpu_type.pcie_gbps == 504
    assert info.unknown is not None
    assert "'NVIDIA H100 Next' is not in gpuflow's GPU catalogue" in info.unknown
    assert "FP32 66.9 TFLOPS" in info.unknown and "memory 3352 GB/s" in info.unknown
    assert "against H100-SXM5-80GB" in info.unknown


def test_an_unknown_gpu_nvml_says_nothing_of_is_said_to_be_the_unit() -> None:
    info = discover(initialised(product="Mystery GPU", figures=GpuFigures()), nic_gbps=100)
    assert info.gpu_type.speed == 1.0 and info.gpu_type.pcie_gbps == 126
    assert info.unknown is not None and "no clocks or bandwidth from NVML" in info.unknown
    assert "against V100-SXM2-16GB" in info.unknown


def conditions(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in node.get("status", {}).get("conditions", [])}


def test_the_agent_says_an_unknown_gpu_is_unknown_on_its_node(
    kube_cluster: RealCluster, caplog: pytest.LogCaptureFixture
) -> None:
    api = kube_cluster.api
    api.create_node({"metadata": {"name": "n0"}})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    api.patch_node_status("n0", {"status": {"conditions": [ready]}})
    nvml = initialised(product="NVIDIA H100 Next", figures=H100_FIGURES)
    with caplog.at_level(logging.WARNING, logger="operators.agent.main"):
        assert run_agent(AgentOptions(node_name="n0", once=True), nvml=nvml, api=api) == 0
    assert any("not in gpuflow's GPU catalogue" in r.message for r in caplog.records)
    node = api.get_node("n0")
    cond = conditions(node)[crd.CONDITION_GPU_UNKNOWN]
    assert (cond["status"], cond["reason"]) == ("True", "NotInCatalogue")
    assert "speed 6 derived from" in cond["message"]
    assert conditions(node)["Ready"]["status"] == "True"  # the kubelet's condition stays
    published = build_cluster([node]).cluster.nodes[0].gpu_type
    assert published.speed == pytest.approx(6.0, abs=0.01)


def test_a_known_gpu_clears_the_condition(kube_cluster: RealCluster) -> None:
    api = kube_cluster.api
    api.create_node({"metadata": {"name": "n0"}})
    assert run_agent(AgentOptions(node_name="n0", once=True), nvml=initialised(), api=api) == 0
    cond = conditions(api.get_node("n0"))[crd.CONDITION_GPU_UNKNOWN]
    assert (cond["status"], cond["reason"]) == ("False", "InCatalogue")
    assert "V100-SXM2-16GB" in cond["message"]


def test_the_sharing_mode_travels_from_the_agent_to_the_cluster() -> None:
    info = discover(initialised(), nic_gbps=100, sharing=SharingMode.TIME_SLICING)
    node = {"metadata": {"name": "n0", "annotations": {crd.ANN_NODE_GPUS: info.to_annotation()}}}
    assert build_cluster([node]).cluster.nodes[0].sharing is SharingMode.TIME_SLICING
    # An annotation from an agent before the field: MPS, what the operator sets up.
    old = NodeGpus.from_annotation(info.to_annotation().replace('"sharing":"time-slicing",', ""))
    assert old.sharing is SharingMode.MPS
