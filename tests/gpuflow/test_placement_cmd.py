"""`gpuflow placement`: the --json contract on a sample of the openb trace, --out's
CSV and plot, the openb loaders keeping every resource, and bad input (one line,
exit code 2)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from controller.traces import TraceError
from experiments.packing.openb import load_openb_node_resources, load_openb_tasks
from gpuflow.cli import main

OPENB = Path("/work/shared/data/openb")
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
KEYS = {
    "placer",
    "seeds",
    "gpu_capacity",
    "alloc_pct",
    "failed_tasks",
    "fragmentation_pct",
    "wall_s",
}


@pytest.fixture
def nodes(tmp_path: Path) -> Path:
    """The first 40 nodes of the openb node list (or like ones when it is absent)."""
    path = tmp_path / "nodes.csv"
    source = OPENB / "openb_node_list_gpu_node.csv"
    if source.exists():
        lines = source.read_text().splitlines()[:41]
    else:
        lines = [NODE_HEADER] + [f"n{i},96000,393216,8,G2" for i in range(40)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def pods(tmp_path: Path) -> Path:
    """The first 300 pods of the default openb trace (or a like mix)."""
    path = tmp_path / "pods.csv"
    source = OPENB / "openb_pod_list_default.csv"
    if source.exists():
        lines = source.read_text().splitlines()[:301]
    else:
        kinds = ["12000,16384,1,1000", "6000,12288,1,460", "8000,4096,0,0", "32000,65536,8,1000"]
        lines = [POD_HEADER] + [f"p{i},{kinds[i % 4]},,LS,Running,0,10,0" for i in range(300)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_is_one_object_per_placer_with_the_contract(
    nodes: Path, pods: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placers = ("best-fit", "fgd", "fgd-cpu-aware")
    argv = ["placement", str(pods), "--nodes", str(nodes), "--placer", ",".join(placers)]
    assert main([*argv, "--seeds", "2", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    gpus = sum(n.gpus for n in load_openb_node_resources(nodes))
    for placer, line in zip(placers, lines, strict=True):
        out = json.loads(line)
        assert set(out) == KEYS
        assert out["placer"] == placer
        assert out["seeds"] == [42, 43]
        assert out["gpu_capacity"] == gpus
        assert list(out["alloc_pct"]) == [str(k) for k in range(10, 131, 10)]
        values = list(out["alloc_pct"].values())
        assert values == sorted(values)
        assert all(v <= min(int(k), 100) + 1e-9 for k, v in out["alloc_pct"].items())
        assert values[-1] > 50.0  # a 40-node cluster takes most of the first GPUs asked
        assert out["failed_tasks"] > 0
        assert 0.0 <= out["fragmentation_pct"] <= 100.0 - values[-1] + 1e-9


def test_out_writes_a_csv_and_a_plot_for_each_placer(
    nodes: Path, pods: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    argv = ["placement", str(pods), "--nodes", str(nodes), "--placer", "random,gpu-packing"]
    assert main([*argv, "--seeds", "1", "--inflate", "0.5", "--out", str(out_dir)]) == 0
    assert "allocated %" in capsys.readouterr().out
    with (out_dir / "placement.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["placer"], r["arrived_pct"]) for r in rows] == [
        (p, str(k)) for p in ("random", "gpu-packing") for k in range(10, 51, 10)
    ]
    assert (out_dir / "placement.png").read_bytes()[:4] == b"\x89PNG"


def test_the_openb_loaders_keep_cpu_memory_shares_and_models(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER + "\n"
        "a,6000,12288,1,460,V100M16|V100M32,LS,Running,0,10,0\n"
        "b,8000,4096,0,0,,BE,Failed,0,,\n"
        "c,32000,65536,8,1000,,LS,Running,0,10,0\n"
    )
    a, b, c = load_openb_tasks(pods)
    assert (a.cpu_milli, a.memory_mib, a.num_gpus, a.gpu_milli) == (6000, 12288, 1, 460)
    assert a.gpu_models == {"V100M16", "V100M32"} and a.is_share
    assert (b.num_gpus, b.gpu_milli, b.cpu_milli) == (0, 0, 8000)
    assert c.total_gpu_milli == 8000 and not c.is_share
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODE_HEADER + "\nx,96000,393216,8,G2\ny,32000,131072,0,nan\n")
    x, y = load_openb_node_resources(nodes)
    assert (x.cpu_milli, x.memory_mib, x.gpus, x.gpu_model) == (96000, 393216, 8, "G2")
    assert (y.gpus, y.gpu_model) == (0, "")


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("p,1000,1024,2,500,,LS,Running,0,10,0", "gpu_milli"),
        ("p,1000,1024,1,1500,,LS,Running,0,10,0", "gpu_milli"),
        ("p,-5,1024,1,1000,,LS,Running,0,10,0", "cpu_milli"),
        ("p,1000,lots,1,1000,,LS,Running,0,10,0", "memory_mib"),
    ],
)
def test_a_bad_pod_row_names_its_line_and_field(tmp_path: Path, row: str, field: str) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(POD_HEADER + "\n" + row + "\n")
    with pytest.raises(TraceError) as caught:
        load_openb_tasks(pods)
    assert caught.value.line == 2 and caught.value.field == field


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--placer", "nope"], "unknown placer 'nope'"),
        (["--placer", "fgd,fgd"], "named twice"),
        (["--placer", "fgd", "--seeds", "0"], "--seeds"),
        (["--placer", "fgd", "--inflate", "nan"], "--inflate"),
        (["--placer", "fgd", "--inflate", "-1"], "--inflate"),
    ],
)
def test_bad_options_are_one_usage_line_and_exit_2(
    nodes: Path, pods: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["placement", str(pods), "--nodes", str(nodes), *extra])
    assert caught.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err and "Traceback" not in err


def test_bad_files_are_one_line_and_exit_2(
    nodes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(POD_HEADER + "\np,1000,1024,2,500,,LS,Running,0,10,0\n")
    missing = tmp_path / "missing.csv"
    for pods_path, nodes_path, expected in (
        (bad, nodes, "field 'gpu_milli'"),
        (missing, nodes, "missing.csv"),
        (bad, bad, "field 'sn'"),
    ):
        argv = ["placement", str(pods_path), "--nodes", str(nodes_path), "--placer", "fgd"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err
