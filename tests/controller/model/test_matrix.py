"""Gavel's throughput matrix (controller.model.perf.matrix): its format, its lookups, and the
simulator's speeds read from it (controller.rates.RateModel with a matrix)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.model.allocation import Allocation
from controller.model.cluster import Cluster, Node, Rack
from controller.model.gpus import GPU_CATALOG
from controller.model.job import JobSpec
from controller.model.perf.matrix import (
    JobType,
    MatrixError,
    ModelTypeRates,
    load_matrix,
    parse_matrix,
    type_allocation,
)
from controller.rates import RateModel
from tests.controller.model.builders import make_node

RES18 = "('ResNet-18 (batch size 64)', 1)"
RES18_128 = "('ResNet-18 (batch size 128)', 1)"
LM = "('LM (batch size 20)', 1)"
GAVEL_JSON = {
    "v100": {
        RES18: {"null": 30.0, LM: [20.0, 10.0]},
        RES18_128: {"null": 18.0},
        "('ResNet-18 (batch size 64)', 2)": {"null": 50.0},
        LM: {"null": 12.0, RES18: [10.0, 20.0]},
        "('A3C', 1)": {"null": 0.0},
    },
    "k80": {
        RES18: {"null": 10.0},
        "('ResNet-18 (batch size 64)', 2)": {"null": 16.0},
        LM: {"null": 3.0},
    },
    "k80_unconsolidated": {"('ResNet-18 (batch size 64)', 2)": {"null": 12.0}},
}


def matrix_text() -> str:
    return json.dumps(GAVEL_JSON)


TWO_GPUS = """
      GPU0  GPU1
GPU0  X     PIX
GPU1  PIX   X
"""


def node_of(name: str, gpu: str) -> Node:
    spec = GPU_CATALOG.find(gpu)
    assert spec is not None
    return make_node(name, gpu_type=spec.gpu_type(), topology=TWO_GPUS)


def two_types() -> Cluster:
    """node 0: two V100s, nodes 1 and 2: two K80s each."""
    nodes = (
        node_of("v", "V100-SXM2-16GB"),
        node_of("k1", "Tesla K80"),
        node_of("k2", "Tesla K80"),
    )
    return Cluster("c", nodes, (Rack("r", 100.0),))


def job(model: str = "ResNet-18", batch: int | None = 64, gpus: int = 1) -> JobSpec:
    return JobSpec(
        job_id="j", submit_s=0.0, num_gpus=gpus, model=model, batch_size=batch, iterations=1000.0
    )


def test_rows_by_model_batch_gpu_type_and_count() -> None:
    m = parse_matrix(matrix_text(), "t.json")
    res18 = JobType("resnet-18", 64)
    assert m.solo_ips(res18, "V100-SXM2-16GB", 1) == 30.0
    # NVML's name finds Gavel's k80 rows; 2 GPUs have a row of their own.
    assert m.solo_ips(res18, "Tesla K80", 2) == 16.0
    assert m.solo_ips(res18, "Tesla K80", 2, consolidated=False) == 12.0
    # No unconsolidated row on V100: the consolidated one.
    assert m.solo_ips(res18, "V100-SXM2-16GB", 2, consolidated=False) == 50.0
    # Gavel's 0.0 (not run) is no rate.
    assert m.job_type("A3C", None) is None
    # Pairs: own rate first.
    assert m.pair_ips(res18, JobType("lm", 20), "V100-SXM2-16GB", 1) == (20.0, 10.0)
    assert m.pair_ips(JobType("lm", 20), res18, "V100-SXM2-16GB", 1) == (10.0, 20.0)
    assert m.pair_ips(res18, JobType("lm", 20), "Tesla K80", 1) is None


def test_a_job_finds_its_row_by_name_catalogue_name_and_nearest_batch() -> None:
    m = parse_matrix(matrix_text(), "t.json")
    assert m.job_type("resnet-18", 100) == JobType("resnet-18", 128)
    assert m.job_type("ResNet-18", 90) == JobType("resnet-18", 64)
    # The catalogue's cifar10 is Gavel's ResNet-18.
    assert m.job_type("cifar10", 64) == JobType("resnet-18", 64)
    assert m.job_type("vgg16", 64) is None


def test_a_job_over_two_types_runs_at_the_slowest() -> None:
    m = parse_matrix(matrix_text(), "t.json")
    spec = job()
    gpus = ["V100-SXM2-16GB", "K80"]
    assert m.rate_ips(spec, gpus, 1, consolidated=True) == 10.0
    # A type without a row: no rate at all.
    assert m.rate_ips(spec, ["V100-SXM2-16GB", "P100-PCIE-16GB"], 1, consolidated=True) is None


def test_the_simulators_speeds_read_the_matrix() -> None:
    cluster = two_types()
    rates = RateModel(cluster, parse_matrix(matrix_text(), "t.json"))
    spec = job(gpus=2)
    assert rates.rate_ips(spec, Allocation.whole([(0, 0), (0, 1)])) == 50.0
    assert rates.rate_ips(spec, Allocation.whole([(1, 0), (1, 1)])) == 16.0
    # Over two K80 servers: the unconsolidated rate; a V100 and a K80 (two servers
    # as well): the slower of V100's 50 (no unconsolidated row) and K80's 12.
    assert rates.rate_ips(spec, Allocation.whole([(1, 0), (2, 0)])) == 12.0
    assert rates.rate_ips(spec, Allocation.whole([(0, 0), (1, 0)])) == 12.0
    assert rates.type_rate_ips(spec, "K80", 2) == 16.0
    assert rates.type_rate_ips(spec, "K80", 8) is None
    # A model the matrix lacks runs at the performance model's speed.
    other = job(model="vgg16", batch=64)
    assert rates.rate_ips(other, Allocation.whole([(0, 0)])) == pytest.approx(
        RateModel(cluster).rate_ips(other, Allocation.whole([(0, 0)]))
    )


def test_without_a_matrix_the_types_speeds_come_from_the_performance_model() -> None:
    cluster = two_types()
    spec = job(model="resnet50", batch=64)
    perf = ModelTypeRates(cluster)
    v100 = perf.type_rate_ips(spec, "V100-SXM2-16GB", 1)
    k80 = perf.type_rate_ips(spec, "K80", 1)
    assert v100 is not None and k80 is not None and v100 > 2 * k80
    assert v100 == pytest.approx(RateModel(cluster).type_rate_ips(spec, "V100-SXM2-16GB", 1))


def test_type_allocation_prefers_one_server() -> None:
    cluster = two_types()
    assert type_allocation(cluster, "K80", 2) == Allocation.whole([(1, 0), (1, 1)])
    assert type_allocation(cluster, "K80", 3) == Allocation.whole([(1, 0), (1, 1), (2, 0)])
    assert type_allocation(cluster, "V100-SXM2-16GB", 3) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "not a mapping of GPU types"),
        ('{"v100": {"ResNet": {"null": 1}}}', "is not ('<job type>', <GPUs>)"),
        ('{"v100": {"(\'A\', 1)": {"null": "fast"}}}', "a rate is a number"),
        ('{"v100": {"(\'A\', 1)": {"null": -1}}}', "finite and >= 0"),
        ('{"v100": {"(\'A\', 1)": {"null": 1, "(\'B\', 1)": [1]}}}', "[own, partner]"),
        ('{"v100": {"(\'A\', 1)": {"null": 0}}}', "no job type has a rate"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(text: str, message: str) -> None:
    with pytest.raises(
        MatrixError,
        match=message.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("]", r"\]"),
    ):
        parse_matrix(text, "t.json")


def test_replay_refuses_a_bad_throughputs_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"v100": 3}')
    trace = Path(__file__).resolve().parents[3] / "examples/traces/gavel_mixed.trace"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuflow.cli",
            "replay",
            str(trace),
            "-c",
            "2x4",
            "-p",
            "fifo",
            "--throughputs",
            str(bad),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "--throughputs" in done.stderr and "not a mapping of job types" in done.stderr


def test_load_matrix_reads_the_shipped_single_job_file() -> None:
    path = Path(__file__).resolve().parents[3] / "controller/model/profiles/gavel/throughputs.json"
    m = load_matrix(path)
    assert m.gpu_types == frozenset({"V100-SXM2-16GB", "P100-PCIE-16GB", "K80"})
    with pytest.raises(MatrixError, match="cannot read"):
        load_matrix(path.parent / "missing.json")


def test_load_matrix_reads_a_gzipped_file_and_names_a_broken_one(tmp_path: Path) -> None:
    """The Helm chart mounts the matrix from a ConfigMap, which holds Gavel's file only
    gzipped: the same rows from either form, and a truncated archive is one line."""
    plain = tmp_path / "t.json"
    plain.write_text(matrix_text())
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(matrix_text().encode()))
    spec = job()
    a, b = load_matrix(plain), load_matrix(packed)
    assert b.gpu_types == a.gpu_types
    assert len(b) == len(a) > 0
    for gpu in a.gpu_types:
        rate = a.rate_ips(spec, [gpu], 1, consolidated=True)
        assert b.rate_ips(spec, [gpu], 1, consolidated=True) == rate
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(packed.read_bytes()[:20])
    with pytest.raises(MatrixError, match="cannot read") as refused:
        load_matrix(broken)
    assert "\n" not in str(refused.value)
