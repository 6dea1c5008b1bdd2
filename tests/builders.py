"""Fixture builders: `make_cluster(nodes=2, gpus=4)`, `make_job("j1", gpus=4)`, views.

Kept free of the YAML spec layer so that model, policy and simulator tests build
exactly the cluster they mean.
"""

from __future__ import annotations

from controller.model import (
    Allocation,
    Cluster,
    Gpu,
    GpuType,
    JobSpec,
    JobStatus,
    JobView,
    Node,
    PairLink,
    PcieLevel,
    Rack,
)

TEST_GPU = GpuType("TEST-16GB", mem_mib=16384, nvlink_gbps=200.0, pcie_gbps=100.0)


def make_node(
    name: str,
    gpus: int = 4,
    rack: int = 0,
    nic_gbps: float = 100.0,
    gpu_type: GpuType = TEST_GPU,
) -> Node:
    links = tuple(
        tuple(None if i == j else PairLink(0, PcieLevel.PIX) for j in range(gpus))
        for i in range(gpus)
    )
    return Node(
        name=name,
        rack=rack,
        gpu_type=gpu_type,
        gpus=tuple(Gpu(i, f"GPU-{name}-{i}", numa=0) for i in range(gpus)),
        links=links,
        nic_gbps=nic_gbps,
    )


def make_cluster(nodes: int = 2, gpus: int = 4, racks: int = 1) -> Cluster:
    per_rack = -(-nodes // racks)
    return Cluster(
        name=f"{nodes}x{gpus}",
        nodes=tuple(make_node(f"n{i}", gpus, rack=i // per_rack) for i in range(nodes)),
        racks=tuple(Rack(f"r{r}", uplink_gbps=100.0 * per_rack) for r in range(racks)),
    )


def make_typed_cluster(*types: tuple[GpuType, int], gpus: int = 4) -> Cluster:
    """One rack of nodes of `gpus` GPUs: `count` nodes of each `(gpu_type, count)`, in
    the order given."""
    kinds = [gpu_type for gpu_type, count in types for _ in range(count)]
    return Cluster(
        name="typed",
        nodes=tuple(make_node(f"n{i}", gpus, gpu_type=t) for i, t in enumerate(kinds)),
        racks=(Rack("r0", uplink_gbps=100.0 * len(kinds)),),
    )


def make_job(
    job_id: str,
    gpus: int = 1,
    *,
    submit_s: float = 0.0,
    duration_s: float = 100.0,
    model: str = "resnet50",
    tenant: str = "default",
    priority: int = 0,
    min_gpus: int = 0,
    max_gpus: int = 0,
    gpu_mem_mib: int | None = None,
    gpu_util: float | None = None,
    deadline_s: float | None = None,
) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        submit_s=submit_s,
        num_gpus=gpus,
        model=model,
        duration_s=duration_s,
        tenant=tenant,
        priority=priority,
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        gpu_mem_mib=gpu_mem_mib,
        gpu_util=gpu_util,
        deadline_s=deadline_s,
    )


def make_view(
    spec: JobSpec,
    *,
    status: JobStatus = JobStatus.QUEUED,
    allocation: Allocation | None = None,
    now_s: float = 0.0,
    done_iters: float = 0.0,
    total_iters: float | None = None,
    rate_ips: float = 1.0,
    attained_gpu_s: float = 0.0,
    executed_s: float = 0.0,
    waiting_since_s: float = 0.0,
) -> JobView:
    """A job view with one iteration per second nominal speed: iterations = seconds."""
    total = total_iters if total_iters is not None else (spec.duration_s or 1.0)
    return JobView(
        job_id=spec.job_id,
        spec=spec,
        status=status,
        allocation=allocation,
        mark_s=now_s,
        attained_gpu_s=attained_gpu_s,
        executed_s=executed_s,
        done_iters=done_iters,
        total_iters=total,
        rate_ips=rate_ips if status is JobStatus.RUNNING else 0.0,
        resume_s=now_s,
        nominal_rate_ips=1.0,
        first_start_s=None if status is JobStatus.QUEUED else 0.0,
        waiting_since_s=waiting_since_s,
    )
