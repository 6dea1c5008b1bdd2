"""Placement by GPU type (controller/model/gpu_choice/gpu_type.py): each job on the type that runs
it fastest with room, on the throughput matrix's speeds."""

from __future__ import annotations

from pathlib import Path

from controller.model import Allocation, GpuPool, JobSpec
from controller.model.gpu_choice.gpu_type import FastestTypePlacer
from controller.model.perf.matrix import load_matrix
from controller.placement import make_placer
from controller.rates import RateModel
from controller.spec import load_cluster
from tests.builders import make_view

ROOT = Path(__file__).resolve().parents[2]


def placer_and_pool() -> tuple[FastestTypePlacer, GpuPool]:
    cluster = load_cluster(str(ROOT / "tests/policies/data/gavel-4-4-4.yaml"))
    rates = RateModel(
        cluster, load_matrix(ROOT / "controller/model/profiles/gavel/throughputs.json")
    )
    placer = FastestTypePlacer(make_placer("consolidated", cluster, 0), cluster, rates)
    return placer, GpuPool.of_cluster(cluster)


def job(job_id: str, model: str, batch: int | None, gpus: int = 1) -> JobSpec:
    return JobSpec(
        job_id=job_id, submit_s=0.0, num_gpus=gpus, model=model, batch_size=batch, iterations=100.0
    )


def test_a_job_goes_to_its_fastest_type_and_then_the_next_with_room() -> None:
    placer, pool = placer_and_pool()
    # Nodes in the file's order: 0 V100, 1 P100, 2 K80; on 4 GPUs Gavel measured
    # ResNet-18 at batch 128 at 70, 45 and 7 steps/s.
    spec = job("a", "ResNet-18", 128, gpus=4)
    assert placer.ranked(make_view(spec), 4) == ["V100-SXM2-16GB", "P100-PCIE-16GB", "K80"]
    first = placer.place(pool, make_view(spec), 4)
    assert first is not None and {s.node for s in first.shares} == {0}
    pool.take(first)
    second = placer.place(pool, make_view(job("b", "ResNet-18", 128, gpus=4)), 4)
    assert second is not None and {s.node for s in second.shares} == {1}


def test_with_no_type_alone_with_room_the_gang_spans_types() -> None:
    placer, pool = placer_and_pool()
    pool.take(Allocation.whole((node, gpu) for node in (0, 1, 2) for gpu in (0, 1)))
    spanning = placer.place(pool, make_view(job("big", "ResNet-18", 64, gpus=4)), 4)
    assert spanning is not None and len({s.node for s in spanning.shares}) >= 2
