"""Placement strategies: best fit, topology (real DGX topologies), fragmentation (FGD),
stickiness, and the invariants every placer keeps (hypothesis)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Allocation, GpuPool, JobStatus, JobView
from controller.model.perf import best_ring_gbps
from controller.placement import (
    PLACERS,
    ConsolidatedPlacer,
    FirstFitPlacer,
    FragmentationAwarePlacer,
    TopologyAwarePlacer,
    UnknownPlacerError,
    WorkloadMix,
    fragmentation,
    make_placer,
    packed_allocation,
    share_fraction,
    unallocatable_idle_gpus,
)
from controller.spec import load_cluster
from tests.builders import make_cluster, make_job, make_view

# The two fully NVLink-connected quads of a DGX-1 V100's hybrid cube-mesh.
QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})


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


@pytest.mark.parametrize("name", sorted(PLACERS))
def test_every_placer_keeps_a_running_jobs_gpus_through_make_placer(name: str) -> None:
    """The rule lives once, in make_placer's wrapper: every placer keeps a running job's
    GPUs when it keeps its size and they are free, and places it anew otherwise."""
    cluster = make_cluster(nodes=2, gpus=4)
    current = Allocation.whole([(1, 2), (1, 3)])
    view = make_view(make_job("j", 2), status=JobStatus.RUNNING, allocation=current)
    placer = make_placer(name, cluster)
    assert placer.place(_pool(cluster), view, 2) == current
    assert placer.place(_pool(cluster), view, 3) != current  # another size: placed anew
    taken = _pool(cluster)
    taken.take(Allocation.whole([(1, 3)]))  # one of its GPUs gone: placed anew
    moved = placer.place(taken, view, 2)
    assert moved is not None and moved != current and (1, 3) not in moved.gpus()


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


# --- every placer, on real topologies -------------------------------------------------

ALL_PLACERS = ("random", "first-fit", "consolidated", "topology-aware", "fragmentation-aware")


def _job(n: int, model: str = "vgg16", job_id: str = "j", mem: int | None = None) -> JobView:
    return make_view(make_job(job_id, n, model=model, gpu_mem_mib=mem))


def test_registry_names_every_placer() -> None:
    assert set(PLACERS) == set(ALL_PLACERS)
    cluster = make_cluster()
    assert isinstance(make_placer("topology-aware", cluster).inner, TopologyAwarePlacer)
    assert isinstance(make_placer("fragmentation-aware", cluster).inner, FragmentationAwarePlacer)


@pytest.mark.parametrize("model", ["vgg16", "resnet50", "ncf"])
def test_dgx1_four_gpu_job_gets_an_nvlink_quad(model: str) -> None:
    cluster = load_cluster("dgx1-v100:1")
    pool = _pool(cluster)
    placer = TopologyAwarePlacer(cluster)
    alloc = placer.place(pool, _job(4, model), 4)
    assert alloc is not None and {g for _, g in alloc.gpus()} in QUADS
    pool.take(Allocation.whole([(0, 0)]))  # the first quad is broken
    alloc = placer.place(pool, _job(4, model), 4)
    assert alloc is not None and {g for _, g in alloc.gpus()} == {4, 5, 6, 7}


def test_dgx1_two_gpu_job_gets_an_nv2_pair_and_keeps_quads_whole() -> None:
    cluster = load_cluster("dgx1-v100:1")
    placer = TopologyAwarePlacer(cluster)
    pool = _pool(cluster)
    for i in range(4):
        alloc = placer.place(pool, _job(2, job_id=f"j{i}"), 2)
        assert alloc is not None
        (_, a), (_, b) = alloc.gpus()
        assert cluster.nodes[0].links[a][b].nvlinks == 2  # type: ignore[union-attr]
        assert {a, b} < {0, 1, 2, 3} or {a, b} < {4, 5, 6, 7}
        pool.take(alloc)
    assert pool.total_free == 0


def test_dgx1_single_gpu_jobs_keep_a_four_gpu_nvlink_ring() -> None:
    cluster = load_cluster("dgx1-v100:1")
    node = cluster.nodes[0]
    best_four = best_ring_gbps(node, (0, 1, 2, 3))
    pool = _pool(cluster)
    placer = TopologyAwarePlacer(cluster)
    for i in range(4):  # half the node in 1-GPU jobs
        alloc = placer.place(pool, _job(1, job_id=f"j{i}"), 1)
        assert alloc is not None
        pool.take(alloc)
    assert best_ring_gbps(node, tuple(pool.free_gpus(0))) == best_four


def test_packed_allocation_takes_the_best_ring() -> None:
    cluster = load_cluster("dgx1-v100:2")
    pair = packed_allocation(cluster, 2)
    assert pair is not None
    (_, a), (_, b) = pair.gpus()
    assert cluster.nodes[0].links[a][b].nvlinks == 2  # type: ignore[union-attr]
    quad = packed_allocation(cluster, 4)
    assert quad is not None and {g for _, g in quad.gpus()} in QUADS


@pytest.mark.parametrize("name", ["consolidated", "topology-aware", "fragmentation-aware"])
def test_dgx_h100_eight_gpu_job_stays_on_one_node(name: str) -> None:
    cluster = load_cluster("dgx-h100:2")
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 0)]))
    alloc = make_placer(name, cluster).place(pool, _job(8), 8)
    assert alloc is not None and alloc.nodes == (1,)


def test_sixteen_gpu_job_takes_two_nodes_of_one_rack_before_spanning_racks() -> None:
    cluster = load_cluster("dgx-a100:48")  # racks of 16 nodes: 0-15, 16-31, 32-47
    assert [cluster.nodes[i].rack for i in (15, 16, 47)] == [0, 1, 2]
    pool = _pool(cluster)
    free_nodes = {3, 20, 27, 40}  # one free node in racks 0 and 2, two in rack 1
    for node in set(range(48)) - free_nodes:
        pool.take(Allocation.whole((node, g) for g in range(7)))  # one GPU left each
    for name in ("topology-aware", "fragmentation-aware"):
        alloc = make_placer(name, cluster).place(pool, _job(16), 16)
        assert alloc is not None and alloc.nodes == (20, 27), name
    pool.take(Allocation.whole((27, g) for g in range(8)))  # now no rack has two
    alloc = TopologyAwarePlacer(cluster).place(pool, _job(16), 16)
    assert alloc is not None and len(alloc.nodes) == 2


def test_gang_spans_racks_when_it_must_and_uses_fewest_nodes() -> None:
    cluster = load_cluster("dgx-a100:32")
    pool = _pool(cluster)
    alloc = TopologyAwarePlacer(cluster).place(pool, _job(24), 24)
    assert alloc is not None and alloc.nodes == (0, 1, 2)
    for node in range(32):
        if node not in (5, 30):
            pool.take(Allocation.whole((node, g) for g in range(8)))
    alloc = TopologyAwarePlacer(cluster).place(pool, _job(16), 16)
    assert alloc is not None and alloc.nodes == (5, 30)
    assert TopologyAwarePlacer(cluster).place(pool, _job(17), 17) is None


def test_topology_aware_prefers_a_good_ring_over_best_fit_for_comm_heavy_jobs() -> None:
    cluster = load_cluster("dgx1-v100:2")
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 3), (0, 4), (0, 6), (0, 7)]))  # node 0: {0,1,2,5} free
    alloc = TopologyAwarePlacer(cluster).place(pool, _job(4, "vgg16"), 4)
    assert alloc is not None and alloc.nodes == (1,)


# --- fragmentation --------------------------------------------------------------------


def test_node_fragmentation_follows_fgd() -> None:
    mix = WorkloadMix.of({1: 1, 4: 1, 0.5: 2})
    # 3 whole free GPUs, no shares: 4-GPU requests cannot use them.
    assert mix.node_fragmentation(8, 3) == pytest.approx(0.25 * 3)
    # 0 free, a 0.3 leftover: nothing fits; every request sees 0.3 of fragments.
    assert mix.node_fragmentation(8, 0, (0.3,)) == pytest.approx(0.3)
    # 1 free + 0.3 + 0.6 leftovers: whole requests lose both leftovers, 4 GPUs also the
    # free one; a half share loses the 0.3.
    frag = 0.25 * 0.9 + 0.25 * 1.9 + 0.5 * 0.3
    assert mix.node_fragmentation(8, 1, (0.3, 0.6)) == pytest.approx(frag)
    # a gang larger than a node wants the whole node
    assert WorkloadMix.of({16: 1}).node_fragmentation(8, 7) == 7
    assert WorkloadMix.of({16: 1}).node_fragmentation(8, 8) == 0


def test_fragmentation_and_unallocatable_idle_gpus_of_a_pool() -> None:
    cluster = make_cluster(nodes=3, gpus=4)
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 0), (0, 1), (0, 2)]))  # node 0: 1 free
    pool.take(Allocation.whole([(1, 0), (1, 1)]))  # node 1: 2 free; node 2: 4 free
    mix = WorkloadMix.of({2: 1, 4: 1})
    assert fragmentation(pool, cluster, mix) == pytest.approx(1 + 0.5 * 2)
    assert unallocatable_idle_gpus(pool, cluster, [2, 4]) == 1
    assert unallocatable_idle_gpus(pool, cluster, [4, 8]) == 3
    assert unallocatable_idle_gpus(pool, cluster, [1]) == 0
    assert unallocatable_idle_gpus(pool, cluster, []) == 0
    # Cluster mode before any agent has published a node: jobs wait, no GPU is idle.
    empty = make_cluster(nodes=0)
    assert unallocatable_idle_gpus(_pool(empty), empty, [2]) == 0


def test_fragmentation_aware_fills_the_node_whose_gpus_no_request_could_use() -> None:
    cluster = make_cluster(nodes=3, gpus=4)
    pool = _pool(cluster)
    pool.take(Allocation.whole([(0, 0), (0, 1)]))  # node 0: 2 free
    pool.take(Allocation.whole([(1, 0), (1, 1), (1, 2)]))  # node 1: 1 free
    placer = FragmentationAwarePlacer(cluster, WorkloadMix.of({2: 3, 1: 1}))
    alloc = placer.place(pool, _job(1), 1)
    assert alloc is not None and alloc.nodes == (1,)  # its single GPU fits 1-GPU jobs only


def test_fragmentation_aware_packs_a_sharing_job_onto_a_partly_used_gpu() -> None:
    cluster = load_cluster("dgx-a100:2")
    pool = _pool(cluster)
    placer = FragmentationAwarePlacer(cluster, WorkloadMix.of({1: 1, 0.3: 1}))
    job = _job(1, "ncf", mem=4096)  # 4096/40960 of memory, 0.3 of compute: 0.3
    first = placer.place(pool, job, 1)
    assert first is not None and first.shares[0].fraction == pytest.approx(0.3)
    pool.take(first, 4096)
    second = placer.place(pool, _job(1, "ncf", job_id="k", mem=4096), 1)
    assert second is not None and second.gpus() == first.gpus()
    pool.take(second, 4096)
    assert share_fraction(_job(1, "vgg16", mem=4096), 1, cluster.nodes[0].gpu_type) == 0.95
    assert share_fraction(_job(2, "ncf", mem=4096), 2, cluster.nodes[0].gpu_type) is None
    big = _job(1, "ncf", job_id="big", mem=40960)  # a whole GPU's memory: a whole GPU
    alloc = placer.place(pool, big, 1)
    assert alloc is not None and not alloc.shared


def test_fragmentation_aware_strands_fewer_gpus_than_first_fit_and_random() -> None:
    cluster = make_cluster(nodes=16, gpus=8, racks=1)
    sizes = [1, 1, 1, 2, 2, 4, 8]
    stranded: dict[str, float] = {}
    for name in ("first-fit", "random", "fragmentation-aware"):
        rng = random.Random(7)
        placer = make_placer(name, cluster, seed=3)
        pool = _pool(cluster)
        live: list[Allocation] = []
        total = 0
        for i in range(3000):
            if live and (rng.random() < 0.45 or pool.total_free < 8):
                pool.release(live.pop(rng.randrange(len(live))))
            n = rng.choice(sizes)
            alloc = placer.place(pool, _job(n, job_id=f"j{i}"), n)
            if alloc is not None:
                pool.take(alloc)
                live.append(alloc)
            total += unallocatable_idle_gpus(pool, cluster, [4, 8])
        stranded[name] = total / 3000
    assert stranded["fragmentation-aware"] < stranded["first-fit"]
    assert stranded["fragmentation-aware"] < stranded["random"]


def test_learned_mix_follows_the_requests() -> None:
    cluster = make_cluster(nodes=2, gpus=8)
    placer = FragmentationAwarePlacer(cluster)
    pool = _pool(cluster)
    for i in range(40):
        placer.place(pool, _job(2 if i % 4 else 8, job_id=f"j{i}"), 2 if i % 4 else 8)
    assert dict(placer.mix.demands) == pytest.approx({2.0: 0.75, 8.0: 0.25})


# --- invariants of every placer --------------------------------------------------------


@st.composite
def _scenes(draw: st.DrawFn) -> tuple[str, list[tuple[int, int | None]], list[int], int]:
    """A cluster, GPUs already taken (node, mem or None), a request."""
    cluster = draw(st.sampled_from(["dgx1-v100:3", "dgx-h100:2", "4x4", "3x2"]))
    taken = draw(
        st.lists(st.tuples(st.integers(0, 23), st.sampled_from([None, 4096])), max_size=20)
    )
    sizes = draw(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8, 12, 16]), min_size=1, max_size=6))
    seed = draw(st.integers(0, 3))
    return cluster, taken, sizes, seed


@settings(max_examples=60, deadline=None)
@given(_scenes())
def test_every_placer_keeps_gangs_whole_and_never_double_books(
    scene: tuple[str, list[tuple[int, int | None]], list[int], int],
) -> None:
    name, taken, sizes, seed = scene
    cluster = load_cluster(name)
    for placer_name in ALL_PLACERS:
        pool = _pool(cluster)
        filler = FirstFitPlacer(cluster)
        for k, (slot, mem) in enumerate(taken):
            node = slot % len(cluster.nodes)
            job = _job(1, "ncf", job_id=f"t{k}", mem=mem)
            alloc = FragmentationAwarePlacer(cluster).place(pool, job, 1) if mem else None
            alloc = alloc or filler.place(pool, job, 1)
            if alloc is not None and alloc.nodes[0] <= node:
                pool.take(alloc, mem)
        outputs = []
        for _run in range(2):  # determinism: a fresh placer, the same calls
            placer = make_placer(placer_name, cluster, seed)
            scratch = pool.copy()
            before = _pool_state(scratch)
            results = []
            for i, n in enumerate(sizes):
                mem = 4096 if n == 1 and i % 2 else None
                job = _job(n, "ncf", job_id=f"q{i}", mem=mem)
                alloc = placer.place(scratch, job, n)
                assert _pool_state(scratch) == before, placer_name  # the pool is not touched
                if alloc is not None:
                    assert alloc.num_gpus == n
                    assert scratch.fits(alloc, mem)
                    scratch.take(alloc, mem)
                    before = _pool_state(scratch)
                    # sticky: the same job, same size, its GPUs given back, keeps them
                    running = make_view(job.spec, status=JobStatus.RUNNING, allocation=alloc)
                    scratch.release(alloc, mem)
                    assert placer.place(scratch, running, n) == alloc
                    scratch.take(alloc, mem)
                else:
                    assert n > scratch.total_free or placer_name != "first-fit"
                results.append(alloc)
            outputs.append(results)
        assert outputs[0] == outputs[1], placer_name


def _pool_state(pool: GpuPool) -> tuple[object, ...]:
    return (
        tuple(tuple(pool.free_gpus(n)) for n in range(pool.num_nodes)),
        tuple(sorted(pool.shared_gpus().items())),
        tuple(frozenset(b) for b in pool.buckets),
        pool.total_free,
    )
