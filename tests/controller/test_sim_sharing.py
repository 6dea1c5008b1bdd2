"""A packing replay under each sharing mode: the same jobs, placer and policy, on
nodes that time-slice or run MPS, finish as controller.model.sharing says."""

from __future__ import annotations

import pytest

from controller.model.catalog import resolve
from controller.model.sharing import SharingMode, slowdown
from controller.placement import make_placer
from controller.sim import Simulator
from policies.registry import make_policy
from tests.builders import make_job
from tests.controller.model.builders import make_cluster

DURATION_S = 3600.0


def replay(mode: SharingMode, model: str = "ncf", gpu_util: float | None = None) -> list[float]:
    """JCTs of 16 jobs of `model` (NCF: u = 0.3) that may share, on one 8-GPU node in
    `mode`; `gpu_util` is each job's own utilisation, as a trace may give it."""
    cluster = make_cluster(1, sharing=mode)
    jobs = [
        make_job(
            f"j{i}", 1, duration_s=DURATION_S, model=model, gpu_mem_mib=1000, gpu_util=gpu_util
        )
        for i in range(16)
    ]
    placer = make_placer("fragmentation-aware", cluster)
    result = Simulator(cluster, jobs, make_policy("fifo"), placer).run()
    return sorted(job.jct_s for job in result.jobs)


def test_packed_jobs_finish_as_the_sharing_model_of_the_mode_says() -> None:
    u = resolve("ncf").gpu_util
    # The fragmentation-aware placer gives each a share of u and packs three to a GPU.
    packed = {mode: slowdown(mode, u, 2 * u, fraction=u) for mode in SharingMode}
    jcts = {mode: replay(mode) for mode in SharingMode}
    for mode in SharingMode:
        assert jcts[mode][-1] == pytest.approx(DURATION_S * packed[mode], rel=1e-3)
    # Time-slicing enforces no share; MPS holds each job to 30 % of the SMs, which
    # costs these jobs more than their neighbours do (A(0.3) = 2.08).
    assert sum(jcts[SharingMode.MPS]) > sum(jcts[SharingMode.TIME_SLICING])


@pytest.mark.parametrize("mode", list(SharingMode))
def test_a_jobs_own_utilisation_stands_in_for_the_catalogues(mode: SharingMode) -> None:
    """ResNet-50 jobs whose trace says they use 30 % of a GPU are placed and slowed as
    NCF jobs (catalogue 0.3) are, not as the catalogue's ResNet-50 (0.95)."""
    as_ncf = replay(mode)
    assert replay(mode, "resnet50", gpu_util=0.3) == pytest.approx(as_ncf, rel=1e-9)
    assert replay(mode, "resnet50") != pytest.approx(as_ncf, rel=1e-3)
