"""The live cluster's samples (api.samples): one sample built from the cluster view,
the agent's NVML readings through the fake NVML, and compaction and retention on real
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.samples.compaction import compact
from api.samples.readings import agent_readings
from api.samples.rows import GpuReading, Sample, Waiting, build_sample
from api.samples.sampler import write
from api.schemas.cluster import GpuPublic, GpuSharePublic, NodePublic
from api.settings import Settings
from api.store.db import make_engine, make_sessionmaker
from api.store.models import ClusterSample, NodeSample, TenantSample
from operators import crd
from operators.agent.discovery import discover, gpu_status
from operators.agent.main import node_patch
from tests.operators.fake_nvml import FakeNvml


def make_node(name: str, shares: dict[int, list[tuple[str, float]]], util: float) -> NodePublic:
    """A 4-GPU node whose GPUs hold `shares` (GPU -> (job, fraction)), each GPU with a
    job at `util` and the others idle."""
    gpus = [
        GpuPublic(
            index=i,
            shares=[GpuSharePublic(job=j, fraction=f) for j, f in shares.get(i, [])],
            util=util if shares.get(i) else 0.0,
        )
        for i in range(4)
    ]
    allocated = sum(f for on in shares.values() for _, f in on)
    return NodePublic(
        name=name, rack=0, gpu_type="V100", gpus=4, gpus_allocated=allocated, jobs=[],
        gpu_list=gpus,
    )  # fmt: skip


def test_a_sample_counts_gpus_by_tenant_and_the_queue_and_its_waits() -> None:
    nodes = [
        make_node("a", {0: [("j1", 1.0)], 1: [("j1", 1.0)], 2: [("j2", 0.5), ("j3", 0.5)]}, 0.8),
        make_node("b", {}, 0.0),
    ]
    readings = {"a": {0: GpuReading(mem_used_mib=1000, mem_total_mib=16000, temperature_c=70)}}
    tenant_of = {"j1": "red", "j2": "red", "j3": "blue"}
    waiting = [Waiting("blue", 30.0), Waiting("blue", 90.0), Waiting("green", 60.0)]
    sample = build_sample(100.0, 30.0, nodes, readings, tenant_of, waiting)
    c = sample.cluster
    assert (c["gpus"], c["gpus_allocated"], c["running"], c["waiting"]) == (8, 3.0, 3.0, 3.0)
    assert (c["wait_mean_s"], c["wait_max_s"]) == (60.0, 90.0)
    assert c["util"] == pytest.approx(3 * 0.8 / 8)
    assert (c["mem_used_mib"], c["mem_total_mib"]) == (1000.0, 16000.0)
    by_tenant = {t["tenant"]: t for t in sample.tenants}
    assert by_tenant["red"]["gpus"] == 2.5 and by_tenant["red"]["running"] == 2.0
    assert by_tenant["blue"]["gpus"] == 0.5 and by_tenant["blue"]["waiting"] == 2.0
    assert by_tenant["blue"]["wait_max_s"] == 90.0
    assert by_tenant["green"]["gpus"] == 0.0 and by_tenant["green"]["waiting"] == 1.0
    a = sample.nodes[0]["gpus"]
    assert a["util"] == [80, 80, 80, 0] and a["alloc"] == [100, 100, 100, 0]
    assert a["mem"] == [1000, None, None, None] and a["temp"] == [70, None, None, None]
    assert a["mem_total"] == 16000


def test_the_agents_nvml_readings_reach_the_sample_by_gpu_uuid() -> None:
    nvml = FakeNvml(
        temperature_c={3: 83},
        power_mw={3: 287_000},
        ecc_errors={5: 4},
        no_ecc=frozenset({6}),
        mem_used={3: 12 * 1024**3},
    )
    nvml.nvmlInit()
    patch = node_patch(discover(nvml, 100.0), gpu_status(nvml))
    node = {"metadata": {"name": "dgx", **patch["metadata"]}}
    readings = agent_readings([node])["dgx"]
    assert readings[3] == GpuReading(
        mem_used_mib=12 * 1024, mem_total_mib=16_160, temperature_c=83, power_w=287.0,
        ecc_errors=0, healthy=True,
    )  # fmt: skip
    assert (readings[5].ecc_errors, readings[5].healthy) == (4, False)
    assert (readings[6].ecc_errors, readings[6].healthy) == (None, True)
    # A node whose agent has not published its figures yet has none.
    bare = {"metadata": {"name": "new", **node_patch(discover(nvml, 100.0), None)["metadata"]}}
    assert crd.ANN_NODE_GPU_STATUS not in bare["metadata"]["annotations"]
    assert agent_readings([bare]) == {}


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    name = "sqlite_settings" if request.param == "sqlite" else "pg_settings"
    settings: Settings = request.getfixturevalue(name)
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as session:
        yield session
    engine.dispose()


def _sample(t_s: float, util: float, healthy: int, ecc: int, wait_s: float) -> Sample:
    """Two nodes, tenant red's job j1 on GPU 0 of each, red waiting `wait_s`; tenant
    blue has a job waiting at one sample in ten (t_s a multiple of 300)."""
    nodes = [make_node(n, {0: [("j1", 1.0)]}, util) for n in ("a", "b")]
    reading = GpuReading(
        mem_used_mib=100, mem_total_mib=1000, ecc_errors=ecc, healthy=bool(healthy)
    )
    readings = {n: {0: reading} for n in ("a", "b")}
    waiting = [Waiting("red", wait_s), *([Waiting("blue", 5.0)] if t_s % 300 == 0 else [])]
    return build_sample(t_s, 30.0, nodes, readings, {"j1": "red"}, waiting)


def _count(session: Session, model: Any, *where: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


def test_compaction_merges_old_samples_into_bins_and_drops_those_past_retention(
    sessions: Session,
) -> None:
    session = sessions
    # Two hours of samples every 30 s: utilisation alternating 0.2 and 0.6, one GPU
    # unhealthy at one sample, ECC errors rising, the wait growing.
    for k in range(240):
        t = 7200.0 + 30.0 * k
        write(session, _sample(t, 0.2 if k % 2 == 0 else 0.6, int(k != 15), k // 100, 30.0 * k))
    session.commit()
    now = 7200.0 + 30.0 * 240  # 14,400
    done = compact(session, now, full_s=3600.0, coarse_s=300.0, retention_s=86400.0)
    # The first hour (10,800 s - 7,200 s) is 12 bins of 5 min; the last hour stays as taken.
    assert (done.merged, done.dropped) == (120 * (1 + 2 + 1) + 12, 0)  # blue: 12 rows
    assert done.written == 12 * (1 + 2 + 2)
    assert _count(session, NodeSample, NodeSample.step_s == 300.0) == 24
    assert _count(session, NodeSample, NodeSample.step_s == 30.0) == 240
    merged = session.scalars(
        select(ClusterSample).where(ClusterSample.step_s == 300.0).order_by(ClusterSample.t_s)
    ).all()
    assert [m.t_s for m in merged] == [7200.0 + 300.0 * b for b in range(12)]
    assert merged[0].util == pytest.approx((0.2 + 0.6) / 2 / 4)  # one GPU of four busy
    # Red waited 0, 30, ... 270 s; blue 5 s at the first sample (mean 2.5 there).
    assert merged[0].wait_max_s == 270.0 and merged[0].wait_mean_s == pytest.approx(135.25)
    assert merged[1].gpus_unhealthy == pytest.approx(2 / 10)  # 2 GPUs at 1 sample of 10
    node = session.scalars(
        select(NodeSample).where(NodeSample.node == "a", NodeSample.t_s == 7500.0)
    ).one()
    assert node.gpus["util"] == [40, 0, 0, 0] and node.gpus["healthy"][0] == 0
    assert node.util == pytest.approx(0.1)
    tenants = session.scalars(select(TenantSample).where(TenantSample.t_s == 7200.0)).all()
    red, blue = sorted(tenants, key=lambda t: t.tenant != "red")
    assert (red.gpus, red.waiting, red.wait_max_s) == (2.0, 1.0, 270.0)
    # Blue waited at one sample of the ten: a mean of 0.1 over the bin, not 1.
    assert (blue.waiting, blue.gpus, blue.wait_max_s) == (pytest.approx(0.1), 0.0, 5.0)
    # Again a little later: nothing new to merge. Far later: past the retention, gone.
    assert compact(session, now + 10.0, 3600.0, 300.0, 86400.0).merged == 0
    gone = compact(session, now + 86400.0 + 4000.0, 3600.0, 300.0, 86400.0)
    assert _count(session, ClusterSample) == 0 and gone.dropped > 0
