import pytest

from controller.model.allocation import Allocation, GpuShare
from controller.model.catalog import CATALOG, measured_profile, resolve
from controller.model.cluster import Cluster, GpuType, Rack
from controller.model.perf import (
    best_ring_gbps,
    iteration_time_s,
    packed_gpu_signature,
    restart_s,
    throughput_ips,
)
from controller.model.sharing import SharingMode, cap_factor, slowdown
from tests.controller.model.builders import PCIE4_TOPOLOGY, make_cluster, make_node

VGG = CATALOG["vgg16"]
GPT2 = CATALOG["gpt2"]
RESNET = CATALOG["resnet50"]


def gpus(*pairs: tuple[int, int]) -> Allocation:
    return Allocation.whole(pairs)


def on_node(node: int, *indices: int) -> Allocation:
    return Allocation.whole((node, g) for g in indices)


def test_best_ring_follows_the_dgx1_cube_mesh() -> None:
    node = make_node("n0")
    assert best_ring_gbps(node, (0, 1, 2, 3)) == 200.0  # 0-1-3-2-0, all NVLink
    assert best_ring_gbps(node, (0, 1, 4, 5)) == 200.0  # 0-1-5-4-0, all NVLink
    assert best_ring_gbps(node, (0, 1, 2, 5)) == pytest.approx(63.0)  # GPU5 needs a SYS hop
    assert best_ring_gbps(node, tuple(range(8))) == 400.0  # 0-3-2-1-5-6-7-4-0, all NV2
    assert best_ring_gbps(node, (3,)) == float("inf")


def test_nvlink_quad_beats_a_set_with_sys_pairs() -> None:
    cluster = make_cluster(1)
    quad = iteration_time_s(VGG, cluster, on_node(0, 0, 1, 2, 3))
    mixed = iteration_time_s(VGG, cluster, on_node(0, 0, 1, 2, 5))
    assert quad < mixed / 1.1


@pytest.mark.parametrize(
    ("name", "batch_size", "factor"),
    [("vgg16", 256, 1.25), ("gpt2", 32, 1.1)],
)
def test_one_node_beats_two_for_communication_heavy_models(
    name: str, batch_size: int, factor: float
) -> None:
    cluster = make_cluster(2, nic_gbps=25.0)
    spread = Allocation.whole([(0, g) for g in range(4)] + [(1, g) for g in range(4)])
    one = iteration_time_s(CATALOG[name], cluster, on_node(0, *range(8)), batch_size=batch_size)
    two = iteration_time_s(CATALOG[name], cluster, spread, batch_size=batch_size)
    assert two > factor * one


def test_placement_barely_matters_for_a_compute_heavy_model() -> None:
    cluster = make_cluster(2)
    one = iteration_time_s(RESNET, cluster, on_node(0, *range(8)), batch_size=1024)
    two = iteration_time_s(
        RESNET,
        cluster,
        Allocation.whole([(0, g) for g in range(4)] + [(1, g) for g in range(4)]),
        batch_size=1024,
    )
    assert one <= two < 1.05 * one


def test_lower_inter_node_bandwidth_slows_multi_node_jobs_only() -> None:
    cluster = make_cluster(2)
    single = on_node(0, 0, 1, 2, 3)
    spread = gpus((0, 0), (0, 1), (1, 0), (1, 1))
    assert iteration_time_s(VGG, cluster, single, inter_node_gbps=1.0) == iteration_time_s(
        VGG, cluster, single
    )
    assert iteration_time_s(VGG, cluster, spread, inter_node_gbps=10.0) > iteration_time_s(
        VGG, cluster, spread, inter_node_gbps=100.0
    )


def test_spanning_racks_is_limited_by_the_uplink_share() -> None:
    same_rack = make_cluster(4, racks=1, uplink_gbps=40.0)
    two_racks = make_cluster(4, racks=2, uplink_gbps=40.0)  # n0, n2 in r0; n1, n3 in r1
    alloc = gpus((0, 0), (1, 0))
    assert packed_gpu_signature(two_racks, alloc).uplink_gbps == 20.0
    assert iteration_time_s(VGG, two_racks, alloc) > iteration_time_s(VGG, same_rack, alloc)
    # Both nodes in one rack of the two-rack cluster: no uplink crossed.
    assert iteration_time_s(VGG, two_racks, gpus((0, 0), (2, 0))) == iteration_time_s(
        VGG, same_rack, alloc
    )


def test_packing_slows_by_the_sharing_model_of_the_nodes_mode() -> None:
    for mode in SharingMode:
        cluster = make_cluster(1, sharing=mode)
        alloc = on_node(0, 0)
        alone = iteration_time_s(RESNET, cluster, alloc)
        packed = iteration_time_s(RESNET, cluster, alloc, gpu_load=0.5)
        assert packed == pytest.approx(alone * slowdown(mode, RESNET.gpu_util, 0.5))
        assert packed > 1.4 * alone  # demand 1.45: the GPU is saturated
    sliced = make_cluster(1, sharing=SharingMode.TIME_SLICING)
    ts = iteration_time_s(RESNET, sliced, alloc, gpu_load=0.95)
    mps = iteration_time_s(RESNET, make_cluster(1), alloc, gpu_load=0.95)
    assert ts > mps  # two saturating jobs: context switches against overlapped kernels


def test_a_job_spanning_a_time_sliced_node_is_rated_time_sliced() -> None:
    nodes = (make_node("a"), make_node("b", sharing=SharingMode.TIME_SLICING))
    cluster = Cluster("mixed", nodes, (Rack("r0", 400.0),))
    assert packed_gpu_signature(cluster, on_node(0, 0)).sharing is SharingMode.MPS
    assert packed_gpu_signature(cluster, gpus((0, 0), (1, 0))).sharing is SharingMode.TIME_SLICING


def test_an_mps_share_below_a_whole_gpu_slows_compute() -> None:
    cluster = make_cluster(1)
    whole = iteration_time_s(RESNET, cluster, on_node(0, 0))
    half = iteration_time_s(RESNET, cluster, Allocation((GpuShare(0, 0, 0.5),)))
    u = RESNET.gpu_util
    assert half == pytest.approx(whole * ((1 - u) + u * cap_factor(0.5)))
    # Time-slicing enforces no share: alone, a half share runs as a whole GPU.
    sliced = make_cluster(1, sharing=SharingMode.TIME_SLICING)
    assert iteration_time_s(RESNET, sliced, Allocation((GpuShare(0, 0, 0.5),))) == whole


def test_equal_signatures_mean_equal_times() -> None:
    cluster = make_cluster(2)
    a = on_node(0, 0, 1, 2, 3)
    b = on_node(1, 4, 5, 6, 7)
    c = on_node(0, 0, 1, 2, 5)
    assert packed_gpu_signature(cluster, a) == packed_gpu_signature(cluster, b)
    assert packed_gpu_signature(cluster, a) != packed_gpu_signature(cluster, c)
    assert hash(packed_gpu_signature(cluster, a)) == hash(packed_gpu_signature(cluster, b))
    assert iteration_time_s(GPT2, cluster, a) == iteration_time_s(GPT2, cluster, b)


@pytest.mark.parametrize("app", ["imagenet", "cifar10"])  # cifar10: Gavel measured it too
def test_measured_profile_on_the_pollux_testbed_reproduces_the_fit(app: str) -> None:
    t4 = GpuType("T4", mem_mib=15_360, nvlink_gbps=0.0, pcie_gbps=126.0, speed=0.32)
    cluster = Cluster(
        "g4dn",
        tuple(
            make_node(f"g{i}", topology=PCIE4_TOPOLOGY, gpu_type=t4, nic_gbps=50.0)
            for i in range(2)
        ),
        (Rack("r0", 400.0),),
    )
    fit = measured_profile(app).fit  # type: ignore[union-attr]
    profile = CATALOG[app]
    one = on_node(0, 0)
    assert iteration_time_s(profile, cluster, one, batch_size=100) == pytest.approx(
        fit.step_s(1, 1, 100)
    )
    # The testbed's reference bandwidth is PHB-level P2P; a PIX pair is a little faster.
    four = on_node(0, 0, 1, 2, 3)
    assert iteration_time_s(profile, cluster, four, batch_size=400) == pytest.approx(
        fit.step_s(1, 4, 100)
    )
    eight = Allocation.whole([(0, g) for g in range(4)] + [(1, g) for g in range(4)])
    assert iteration_time_s(profile, cluster, eight, batch_size=800) == pytest.approx(
        fit.step_s(2, 8, 100)
    )
    # On V100s the same job computes faster: by the scalar speeds (1 / 0.32) where
    # nothing was measured on a V100 (imagenet), by Gavel's rate where it was (cifar10:
    # 1.9x the T4's measured step).
    v100 = make_cluster(1)
    assert iteration_time_s(profile, v100, one, batch_size=100) < fit.step_s(1, 1, 100) / 1.8


def test_batch_size_and_accumulation() -> None:
    cluster = make_cluster(1)
    alloc = on_node(0, 0)
    small = iteration_time_s(RESNET, cluster, alloc, batch_size=64)
    large = iteration_time_s(RESNET, cluster, alloc, batch_size=128)
    accumulated = iteration_time_s(RESNET, cluster, alloc, batch_size=256)  # 2 steps of 128
    assert small < large < accumulated
    assert accumulated == pytest.approx(2 * large)


def test_faster_gpus_compute_faster() -> None:
    # GPU types of a spec's own (nothing measured on them): the scalar speeds alone.
    unit = GpuType("unit", mem_mib=40_000, nvlink_gbps=200.0, pcie_gbps=126.0, speed=1.0)
    fast = GpuType("fast", mem_mib=40_000, nvlink_gbps=200.0, pcie_gbps=126.0, speed=2.0)
    base = iteration_time_s(
        RESNET, Cluster("c", (make_node("a", gpu_type=unit),), (Rack("r", 100.0),)), on_node(0, 0)
    )
    cluster = Cluster("c", (make_node("a", gpu_type=fast),), (Rack("r", 100.0),))
    assert iteration_time_s(RESNET, cluster, on_node(0, 0)) == pytest.approx(base / 2)


def test_throughput_and_restart() -> None:
    cluster = make_cluster(1)
    alloc = on_node(0, 0, 1)
    assert throughput_ips(VGG, cluster, alloc) == pytest.approx(
        1 / iteration_time_s(VGG, cluster, alloc)
    )
    assert 10.0 < restart_s(RESNET) < restart_s(GPT2) < 120.0
    assert restart_s(resolve("unknown-model")) > 0


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_profile_runs_on_one_and_many_gpus(name: str) -> None:
    cluster = make_cluster(2)
    profile = CATALOG[name]
    one = throughput_ips(profile, cluster, on_node(0, 0))
    many = throughput_ips(profile, cluster, on_node(0, *range(8)))
    assert one > 0 and many > 0
