"""CASSINI's placement wrapper: equally fast candidates, the least loaded shared links."""

from __future__ import annotations

from controller.model import Allocation, GpuPool, JobView
from controller.network.phases.cassini_placement import CassiniPlacer
from controller.network.registry import wrap_placer
from controller.placement import FirstFitPlacer
from tests.builders import make_cluster, make_job, make_view

# Three racks of three 4-GPU nodes (nodes 0-2, 3-5, 6-8), 300 Gbit/s uplinks.
CLUSTER = make_cluster(nodes=9, gpus=4, racks=3)


def _node(n: int) -> Allocation:
    return Allocation.whole((n, g) for g in range(4))


def _pool(busy: list[int]) -> GpuPool:
    pool = GpuPool.of_cluster(CLUSTER)
    for n in busy:
        pool.take(_node(n))
    return pool


def _vgg(job_id: str) -> JobView:
    return make_view(make_job(job_id, 8, model="vgg16"))


def test_a_job_moves_to_the_racks_it_shares_less_with_at_the_same_speed() -> None:
    first_fit = FirstFitPlacer(CLUSTER)
    placer = CassiniPlacer(first_fit, CLUSTER)
    # Only one free node in racks 0 and 1, two in rack 2: job a crosses racks 0-1.
    a = placer.place(_pool([1, 2, 4, 5, 8]), _vgg("a"), 8)
    assert a is not None and set(a.nodes) == {0, 3}
    # Job b: first fit would take nodes 1 and 4, crossing both of a's racks; the wrapper
    # keeps a cross-rack placement (same time alone) that shares one rack with a.
    pool = _pool([0, 3, 2, 5, 8, 7])
    plain = first_fit.place(pool, _vgg("b"), 8)
    assert plain is not None and set(plain.nodes) == {1, 4}
    b = placer.place(pool, _vgg("b"), 8)
    assert b is not None and len({n // 3 for n in b.nodes}) == 2
    assert set(b.nodes) in ({4, 6}, {1, 6})
    assert placer.moved == 1


def test_a_job_whose_gpus_show_free_is_forgotten() -> None:
    placer = CassiniPlacer(FirstFitPlacer(CLUSTER), CLUSTER)
    placer.place(_pool([1, 2, 4, 5, 8]), _vgg("a"), 8)
    assert set(placer.placed) == {"a"}
    # a's nodes 0 and 3 are free again: b takes first fit's choice.
    b = placer.place(_pool([2, 5, 8, 7]), _vgg("b"), 8)
    assert b is not None and set(b.nodes) == {0, 1}
    assert placer.moved == 0 and "a" not in placer.placed


def test_the_registry_wraps_only_for_cassini() -> None:
    inner = FirstFitPlacer(CLUSTER)
    assert wrap_placer(inner, CLUSTER, "fair") is inner
    assert wrap_placer(inner, CLUSTER, "dedicated") is inner
    wrapped = wrap_placer(inner, CLUSTER, "cassini")
    assert isinstance(wrapped, CassiniPlacer) and wrapped.inner is inner
