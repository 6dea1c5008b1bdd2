"""Placement strategies: best fit on one node, fewest nodes in one rack, stickiness."""

from __future__ import annotations

import pytest

from controller.model import Allocation, GpuPool, JobStatus
from controller.placement import (
    ConsolidatedPlacer,
    FirstFitPlacer,
    UnknownPlacerError,
    make_placer,
    packed_allocation,
)
from tests.builders import make_cluster, make_job, make_view


def _pool(cluster):  # type: ignore[no-untyped-def]
    return GpuPool(cluster.gpus_per_node, (n.gpu_type.mem_mib for n in cluster.nodes))


def test_best_fit_picks_the_fullest_node_that_still_fits() -> None:
    cluster = make_cluster(nodes=3, gpus=4)
    pool = _pool(cluster)
    pool.take(Allocation.whole([(1, 0), (1, 1)]))  # node 1 has 2 free
    pool.take(Allocation.whole([(2, 0)]))  # node 2 has 3 free
    alloc = ConsolidatedPlacer(cluster).place(pool, make_view(make_job("j", 2)), 2)
    assert alloc is not None and alloc.nodes == (1,)


def test_large_gang_stays_in_one_rack_when_it_can() -> None:
    cluster = make_cluster(nodes=4, gpus=4, racks=2)  # racks: {0,1}, {2,3}
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 0)]))  # rack 0 has 7 free, rack 1 has 8
    alloc = ConsolidatedPlacer(cluster).place(pool, make_view(make_job("j", 8)), 8)
    assert alloc is not None and alloc.nodes == (2, 3)


def test_gang_is_none_when_not_enough_gpus() -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 0)]))
    assert ConsolidatedPlacer(cluster).place(pool, make_view(make_job("j", 8)), 8) is None


def test_placer_prefers_the_jobs_current_gpus() -> None:
    cluster = make_cluster(nodes=2, gpus=4)
    current = Allocation.whole([(1, 2), (1, 3)])
    view = make_view(make_job("j", 2), status=JobStatus.RUNNING, allocation=current)
    for placer in (ConsolidatedPlacer(cluster), FirstFitPlacer(cluster)):
        assert placer.place(_pool(cluster), view, 2) == current


def test_pool_refuses_double_booking_and_tracks_shares() -> None:
    cluster = make_cluster(nodes=1, gpus=2)
    pool = _pool(cluster)
    half = Allocation((_share(0, 0, 0.5),))
    pool.take(half, 4096)
    pool.take(half, 4096)
    with pytest.raises(ValueError):
        pool.take(half, 4096)  # a third half does not fit
    with pytest.raises(ValueError):
        pool.take(Allocation.whole([(0, 0)]))  # the GPU is shared, not free
    pool.release(half, 4096)
    pool.release(half, 4096)
    assert pool.free_gpus(0) == [0, 1]


def test_packed_allocation_uses_fewest_nodes() -> None:
    cluster = make_cluster(nodes=4, gpus=4)
    alloc = packed_allocation(cluster, 8)
    assert alloc is not None and len(alloc.nodes) == 2


def test_unknown_placer_lists_known() -> None:
    with pytest.raises(UnknownPlacerError, match="consolidated"):
        make_placer("nope", make_cluster())


def _share(node: int, gpu: int, fraction: float):  # type: ignore[no-untyped-def]
    from controller.model import GpuShare

    return GpuShare(node, gpu, fraction)
